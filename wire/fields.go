package wire

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// TopFields sets out[i] to the value of doc's top-level key keys[i], the
// first of a repeated key as gjson.Get reads it, in one walk over the keys:
// a Get per key scans the document once per key, to its end for a key it
// does not have (as a request without temperature). out must be as long as
// keys; keys not found leave their Result zero. The Results are views of
// doc (their Raw and Str alias it): valid while doc is, which must not be
// written meanwhile.
func TopFields(doc []byte, keys []string, out []gjson.Result) {
	clear(out)
	left := len(keys)
	gjson.Parse(unsafe.String(unsafe.SliceData(doc), len(doc))).ForEach(func(k, v gjson.Result) bool {
		for i, key := range keys {
			if k.Str == key && !out[i].Exists() {
				out[i] = v
				left--
				break
			}
		}
		return left > 0
	})
}

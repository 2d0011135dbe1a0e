package pipeline

import (
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// Field is a top-level request field that more than one layer reads.
type Field uint8

// The fields Request.Field finds.
const (
	FieldTemperature Field = iota
	FieldN
	FieldLogprobs
	FieldModalities
	FieldMaxTokens
	FieldMaxCompletionTokens
	numFields
)

var fieldNames = [numFields]string{"temperature", "n", "logprobs", "modalities", "max_tokens", "max_completion_tokens"}

// fieldMemo is where each Field's value sits in the body it was read from
// (offset and length of its JSON; length 0: absent). It names that body, so
// a layer that stores a new Body gets a fresh walk.
type fieldMemo struct {
	body *byte
	n    int
	at   [numFields]struct{ off, n int }
}

// Field returns Body's top-level field f (the first of a repeated key, as
// gjson.Get reads it). The first call for a Body finds every Field in one
// walk over its keys, and later calls (by any layer, on this request or a
// clone with the same Body) reuse it: the response cache and context
// editing each read a few, and a body of a long conversation is costly to
// walk. The result is a view of Body, valid while Body is.
func (r *Request) Field(f Field) gjson.Result {
	p := unsafe.SliceData(r.Body)
	if r.fields.body != p || r.fields.n != len(r.Body) {
		r.fields = fieldMemo{body: p, n: len(r.Body)}
		var vals [numFields]gjson.Result
		wire.TopFields(r.Body, fieldNames[:], vals[:])
		for i, v := range vals {
			if v.Raw != "" {
				off := uintptr(unsafe.Pointer(unsafe.StringData(v.Raw))) - uintptr(unsafe.Pointer(p))
				r.fields.at[i] = struct{ off, n int }{int(off), len(v.Raw)}
			}
		}
	}
	at := r.fields.at[f]
	if at.n == 0 {
		return gjson.Result{}
	}
	return gjson.Parse(unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(p), at.off)), at.n))
}

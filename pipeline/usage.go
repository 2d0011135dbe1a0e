package pipeline

import (
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usageMemo is Body's top-level usage, found once, and its counts, read
// once. It names the body it was read from, so a layer that stores a new
// Body gets a fresh read.
type usageMemo struct {
	body   *byte
	n      int
	usage  gjson.Result
	parsed int8 // 0: counts not read yet; 1: read; -1: usage is not an object
	counts wire.ChatUsage
}

// Usage returns Body's top-level "usage" value (gjson.Result{} when there is
// none). The usage object sits at the end of a completion, so finding it
// scans the whole body; the meter, the prompt cache and the access log each
// need it, and the scan is done once per Body. The result's Raw is a view of
// Body: valid while Body is.
func (r *Response) Usage() gjson.Result {
	if len(r.Body) == 0 {
		r.usage = usageMemo{parsed: -1} // no body, no usage: forget an earlier body's
		return gjson.Result{}
	}
	p := unsafe.SliceData(r.Body)
	if r.usage.body != p || r.usage.n != len(r.Body) {
		r.usage = usageMemo{body: p, n: len(r.Body), usage: gjson.Get(unsafe.String(p, len(r.Body)), "usage")}
	}
	return r.usage.usage
}

// ChatUsage returns the token counts of Body's usage object, read once per
// Body; ok is false when there is none.
func (r *Response) ChatUsage() (c wire.ChatUsage, ok bool) {
	u := r.Usage()
	if r.usage.parsed == 0 {
		r.usage.parsed = -1
		if r.usage.counts, ok = wire.ParseChatUsage(u); ok {
			r.usage.parsed = 1
		}
	}
	return r.usage.counts, r.usage.parsed == 1
}

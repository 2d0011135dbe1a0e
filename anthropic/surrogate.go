package anthropic

import (
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
)

// halves moves a UTF-16 surrogate pair that a server split between two
// deltas of one block back together. A server that cuts its text by UTF-16
// units (JavaScript's string length) may end one delta's string with the
// high half of a pair ("…\ud83d") and start the next one's with the low
// half ("\ude00…"); each read alone decodes its half to U+FFFD. The high
// half is taken off the end of a delta's text and put back in front of the
// low half that starts the block's next delta. A carried half that the
// next delta does not take was a lone half, which decodes to U+FFFD alone:
// it is dropped, as the OpenAI-kind stream drops one.
type halves struct {
	block int
	half  [6]byte // `\uD8xx`
	held  bool
}

// text returns the decoded text of v, a delta's string member in block i,
// with a half carried from the block's last delta put back in front and a
// high half at its own end taken off and carried. It allocates only when
// it moves a half.
func (h *halves) text(i int, v gjson.Result) string {
	raw := v.Raw
	if v.Type != gjson.String || len(raw) < 2 {
		return v.Str
	}
	var joined []byte
	if h.held {
		h.held = false
		if h.block == i && len(raw) >= 7 && raw[1] == '\\' && raw[2] == 'u' && isHalf(raw[3:7], 0xDC00) {
			joined = append(append(append(joined, '"'), h.half[:]...), raw[1:]...)
		}
	}
	if n := len(raw); n >= 8 && raw[n-7] == '\\' && raw[n-6] == 'u' && isHalf(raw[n-5:n-1], 0xD800) &&
		jsonstring.Unescaped(raw, n-7) {
		copy(h.half[:], raw[n-7:n-1])
		h.block, h.held = i, true
		if joined == nil {
			joined = append(joined, raw[:n-7]...)
		} else {
			joined = joined[:len(joined)-7]
		}
		joined = append(joined, '"')
	}
	if joined == nil {
		return v.Str
	}
	return gjson.ParseBytes(joined).Str
}

// isHalf reports whether the four hex digits h are a surrogate half in
// [base, base+0x400): 0xD800 high, 0xDC00 low.
func isHalf(h string, base rune) bool {
	r, ok := jsonstring.Hex4(h)
	return ok && r >= base && r < base+0x400
}

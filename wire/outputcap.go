package wire

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// capKeys are the chat request fields that cap an answer's output tokens.
var capKeys = [2]string{"max_completion_tokens", "max_tokens"}

// OutputCap is a chat request's cap on its answer's output tokens: the
// least of its max_completion_tokens and max_tokens. A gateway that makes
// several model calls for one answer (the tool loop's rounds, a prompted
// model's re-asks) gives each call what the calls before left of it
// (Left), so that the cap bounds the answer, as a provider's bounds one.
type OutputCap struct {
	N      int64   // 0: the request sets none
	fields [2]bool // which of capKeys the request sets
}

// ReadOutputCap reads body's output cap.
func ReadOutputCap(body []byte) OutputCap {
	var c OutputCap
	for i, v := range gjson.GetManyBytes(body, capKeys[0], capKeys[1]) {
		if v.Type == gjson.Number && v.Num >= 1 {
			c.fields[i] = true
			if n := v.Int(); c.N == 0 || n < c.N {
				c.N = n
			}
		}
	}
	return c
}

// Spent reports whether used output tokens reach the cap.
func (c OutputCap) Spent(used int64) bool { return c.N > 0 && used >= c.N }

// Left returns body with the cap's fields set to what used output tokens
// leave of the cap (at least 1); body itself when there is no cap or
// nothing was used.
func (c OutputCap) Left(body []byte, used int64) ([]byte, error) {
	if c.N == 0 || used <= 0 {
		return body, nil
	}
	left := max(c.N-used, 1)
	var err error
	for i, set := range c.fields {
		if set && err == nil {
			body, err = sjson.SetBytes(body, capKeys[i], left)
		}
	}
	return body, err
}

package wire

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// GatewayID is the completion id of an answer whose upstream gave none:
// OpenAI's clients key a stream's chunks by it, and its schema requires one.
// The clock and a random part: two streams that start in the same
// nanosecond, on one replica or two, get two ids.
func GatewayID() string {
	b := make([]byte, 0, 32)
	b = append(b, "chatcmpl-gw"...)
	b = strconv.AppendUint(b, uint64(time.Now().UnixNano()), 36)
	b = strconv.AppendUint(b, uint64(rand.Uint32()), 36)
	return string(b)
}

package wire

import (
	"strconv"
	"time"
)

// GatewayID is the completion id of an answer whose upstream gave none:
// OpenAI's clients key a stream's chunks by it, and its schema requires one.
func GatewayID() string {
	return "chatcmpl-gw" + strconv.FormatUint(uint64(time.Now().UnixNano()), 36)
}

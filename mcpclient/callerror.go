package mcpclient

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxRPCMessage bounds the part of a JSON-RPC error's message the model
// sees: the message is meant to be one line, and a server could send
// megabytes of it.
const maxRPCMessage = 1024

// The codes of the *jsonrpc.Error values the SDK makes itself for a call
// that never got an answer: rejected by the transport (an HTTP request
// that failed or a transient status), and either side closing. They are
// transport failures, not the server's answer.
const (
	codeRejected      = -32005
	codeClientClosing = -32003
	codeServerClosing = -32004
)

// rpcError returns the JSON-RPC error the server answered a call with, or
// nil when err is not one (a transport failure). The SDK returns the
// error object of the server's response as a *jsonrpc.Error in err's
// chain, the first one there also when an HTTP error status carried it.
func rpcError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return nil
	}
	switch we.Code {
	case codeRejected, codeClientClosing, codeServerClosing:
		return nil
	}
	return we
}

// rpcMessage is what the model sees of the server's JSON-RPC error: its
// message, at most maxRPCMessage bytes (cut at a rune boundary), or the
// code when the message is empty.
func rpcMessage(we *jsonrpc.Error) []byte {
	msg := strings.ToValidUTF8(strings.TrimSpace(we.Message), "\uFFFD")
	if msg == "" {
		return []byte("the tool's server refused the call (JSON-RPC error " + strconv.FormatInt(we.Code, 10) + ")")
	}
	if len(msg) <= maxRPCMessage {
		return []byte(msg)
	}
	n := maxRPCMessage
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return []byte(msg[:n] + "…")
}

// msgTooLarge is what the model sees of a tool answer over the bound on
// one message.
var msgTooLarge = []byte("the tool's output was too large (over " + strconv.Itoa(maxMessageBytes>>20) +
	" MiB); ask it for less")

// tooLarge reports whether err is a call whose answer went over the bound
// on one message: headerRT's on an HTTP body, or the SDK's on a stdio line
// or an SSE event. The SDK passes headerRT's error on as text (%v), and
// its own are unexported, so all are recognised by their text: the tests
// TestCallJSONRPCErrorOverStdio and TestCallJSONRPCErrorOverHTTP fail if
// the SDK rewords them. A miss only costs the clearer message.
func tooLarge(err error) bool {
	s := err.Error()
	return errors.Is(err, errTooLarge) || strings.Contains(s, errTooLarge.Error()) ||
		strings.Contains(s, "frame exceeded the configured maximum line length") || strings.Contains(s, "SSE event exceeded")
}

// unreadable reports whether err is the SDK's refusal of a tool result
// it could not decode: a content block of a type it does not know (a
// server on a later revision of the protocol), an image or audio block
// whose data is not base64, or a result of the wrong shape (content that
// is not a list). The server answered, and is up. The SDK passes some of
// these on as text, so they are recognised by it too.
func unreadable(err error) bool {
	var ce base64.CorruptInputError
	var te *json.UnmarshalTypeError
	s := err.Error()
	return errors.As(err, &ce) || errors.As(err, &te) || strings.Contains(s, "unrecognized content type") ||
		strings.Contains(s, "illegal base64 data") || strings.Contains(s, "json: cannot unmarshal")
}

// msgUnreadable is the error result of such an answer.
var msgUnreadable = []byte("the tool's server answered with content the gateway cannot read (a block of an unknown type, data that is not base64, or a result of the wrong shape); the rest of its answer is not available either")

// msgMalformed is the error result of an answer that is not a JSON-RPC
// message at all (headerRT's error answer in its place).
var msgMalformed = []byte("the tool's server sent an answer the gateway cannot read (not a JSON-RPC message)")

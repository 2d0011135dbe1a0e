package toolloop

import (
	"errors"
	"net/http"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// maxRoundBytes bounds what the loop keeps of one streamed upstream round:
// the text (with the held copy of its start, see loopStream.held, and the
// logprobs held with it) and every tool call's id, name and arguments. It
// is the default of the providers' max_response_bytes (config.Provider.MaxResponseBytes, 32 MiB), the bound
// on a non-streamed answer; the loop cannot see the provider of a round
// (fallback picks it), so it uses the default for every one. The upstream
// reader bounds each SSE event (8 MiB), not a stream, and an upstream that
// sends endless content or argument deltas would otherwise grow the
// gateway's memory without limit. The agent tool's read of its model's
// stream (streamText) has the same bound. Loop.roundMax holds it (tests
// set a small one).
const maxRoundBytes = 32 << 20

// errRoundTooLarge is the cause of the error a round over maxRoundBytes ends
// with: the client gets what the proxy writes for a non-streamed answer over
// max_response_bytes (502 server_error upstream_response_too_large), as the
// stream's error event (or, from the agent tool, as its error result).
var errRoundTooLarge = errors.New("toolloop: an upstream round exceeds the loop's size limit")

func roundTooLarge() error {
	e := pipeline.Errorf(http.StatusBadGateway, pipeline.TypeServer, pipeline.CodeUpstreamResponseTooLarge,
		"upstream response exceeds the gateway's size limit")
	e.Err = errRoundTooLarge
	return e
}

// kept returns the bytes the current round keeps. Its refusal and
// reasoning text count though the loop does not keep them: a JSON answer
// does (wire.ChatJSON), and a stream of the same request is held to the
// same bound.
func (st *loopStream) kept() int {
	return len(st.text) + len(st.held) + st.heldLP.Size() + st.acc.size + st.extra.Size() + st.top.Size() + st.sideBytes
}

// tooLarge ends the stream with roundTooLarge and lets go of the round.
func (st *loopStream) tooLarge() {
	st.fail(roundTooLarge())
	st.text, st.held, st.heldLP = nil, nil, wire.Logprobs{}
	st.acc.calls, st.acc.size, st.sideBytes = nil, 0, 0
	st.extra.Reset()
	st.top.Reset()
}

// argScan tells whether a call's arguments, as they grow, are one complete
// JSON value: valid reports what jsonvalid.Bytes(args) reports, but reads
// each byte once (and ValidBytes at most once, on the value alone) instead
// of the whole arguments on every chunk. Only appending to args is allowed
// between calls of valid.
//
// It follows the value's structure: for an object or array the depth
// outside strings, for a string its escapes, for true/false/null their
// length, for a number gjson's number grammar. Where that structure says
// the value ends, ValidBytes judges the value's text; what follows may only
// be whitespace. This equals ValidBytes on every prefix: in valid JSON the
// structural scan finds the value's real end, and gjson reads an object,
// array, string or literal without looking past its end, so a value that is
// invalid there stays invalid whatever is appended (dead).
type argScan struct {
	pos   int   // bytes of args scanned
	start bool  // the value's first byte was seen
	str   bool  // inside a string
	esc   bool  // after a backslash inside a string
	depth int   // open objects and arrays
	lit   int   // true/false/null: where the literal ends
	num   uint8 // a number's state (numMinus...numExp); 0 = not a number
	end   bool  // the value ended: only whitespace may follow
	dead  bool  // no continuation of args is valid
}

// A number's states, as gjson's validnumber reads one.
const (
	numMinus uint8 = iota + 1 // after '-': a digit must follow
	numZero                   // a leading 0 (accepting)
	numInt                    // integer digits (accepting)
	numDot                    // after '.': a digit must follow
	numFrac                   // fraction digits (accepting)
	numE                      // after e/E: a sign or digit must follow
	numSign                   // after the exponent's sign: a digit must follow
	numExp                    // exponent digits (accepting)
)

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// valid reports whether args is one complete JSON value (surrounded by
// whitespace), exactly as jsonvalid.Bytes(args) does.
func (s *argScan) valid(args []byte) bool {
	for ; s.pos < len(args) && !s.dead; s.pos++ {
		b := args[s.pos]
		switch {
		case s.end:
			s.dead = !isJSONSpace(b)
		case !s.start:
			s.scanFirst(b)
		case s.lit > 0:
			if s.pos+1 == s.lit {
				s.finish(args[:s.lit])
			}
		case s.num > 0:
			s.scanNumber(b)
		case s.str:
			switch {
			case s.esc:
				s.esc = false
			case b == '\\':
				s.esc = true
			case b == '"':
				s.str = false
				if s.depth == 0 {
					s.finish(args[:s.pos+1])
				}
			}
		default: // inside an object or array, outside strings
			switch b {
			case '"':
				s.str = true
			case '{', '[':
				s.depth++
			case '}', ']':
				if s.depth--; s.depth == 0 {
					s.finish(args[:s.pos+1])
				}
			}
		}
	}
	if s.dead {
		return false
	}
	if s.num > 0 && !s.end {
		return s.num == numZero || s.num == numInt || s.num == numFrac || s.num == numExp
	}
	return s.end
}

// scanFirst reads a byte before the value has started.
func (s *argScan) scanFirst(b byte) {
	if isJSONSpace(b) {
		return
	}
	s.start = true
	switch {
	case b == '{' || b == '[':
		s.depth = 1
	case b == '"':
		s.str = true
	case b == 't' || b == 'n':
		s.lit = s.pos + 4
	case b == 'f':
		s.lit = s.pos + 5
	case b == '-':
		s.num = numMinus
	case b == '0':
		s.num = numZero
	case isDigit(b):
		s.num = numInt
	default:
		s.dead = true
	}
}

// finish judges the value, whose text (after any leading whitespace) ends
// args; only whitespace may follow it.
func (s *argScan) finish(value []byte) {
	s.end = true
	s.dead = !jsonvalid.Bytes(value)
}

// scanNumber reads the next byte of a number: it continues it, or ends an
// accepted number with whitespace, or makes args invalid for good.
func (s *argScan) scanNumber(b byte) {
	next := uint8(0)
	switch s.num {
	case numMinus:
		switch {
		case b == '0':
			next = numZero
		case isDigit(b):
			next = numInt
		}
	case numZero, numInt, numFrac:
		switch {
		case s.num == numInt && isDigit(b), s.num == numFrac && isDigit(b):
			next = s.num
		case b == '.' && s.num != numFrac:
			next = numDot
		case b == 'e' || b == 'E':
			next = numE
		}
	case numDot:
		if isDigit(b) {
			next = numFrac
		}
	case numE:
		switch {
		case b == '+' || b == '-':
			next = numSign
		case isDigit(b):
			next = numExp
		}
	case numSign, numExp:
		if isDigit(b) {
			next = numExp
		}
	}
	if next != 0 {
		s.num = next
		return
	}
	accepting := s.num == numZero || s.num == numInt || s.num == numFrac || s.num == numExp
	if accepting && isJSONSpace(b) {
		s.end = true
		return
	}
	s.dead = true
}

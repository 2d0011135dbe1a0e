package toolprompt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
)

// The fenced protocol: the model ends its reply with one block
//
//	```tool_calls
//	[{"name": "get_weather", "arguments": {"city": "Oslo"}}]
//	```
//
// holding a JSON array of calls (or one call object). Text before the
// block is the model's visible text; anything after it is dropped.
const (
	fenceOpen  = "```tool_calls"
	fenceClose = "```"
)

// Bounds on untrusted model output: a block larger than maxBlock or with
// more than maxCalls calls is malformed, never buffered further.
const (
	maxBlock = 1 << 20
	maxCalls = 64
)

// Call is one tool call parsed from the model's text. Args is a compact JSON
// object owned by the Call.
type Call struct {
	Name string
	Args []byte
}

// Scanner splits a model's streamed text into the visible text before a
// call block and the block itself. It holds back only what could still be
// the start of the fence, so text streams live. Not safe for concurrent use.
type Scanner struct {
	held    []byte // released text's tail that may begin the fence
	block   []byte // bytes after the opening fence
	inBlock bool
	over    bool // the block outgrew maxBlock
	out     []byte
	shown   int // bytes released by Feed
	// indent is the number of spaces the released text ends with after
	// its last line break (or its start), -1 when another character came
	// since: the fence opens a block only at the start of a line
	// (indented three spaces at most, as a Markdown fence), so that prose
	// that mentions it is not taken for a call.
	indent int
}

// Released returns how many bytes of text Feed has released.
func (s *Scanner) Released() int { return s.shown }

// Feed consumes the next fragment of text and returns the text that can be
// shown now. The result is valid until the next call on s.
func (s *Scanner) Feed(text []byte) []byte {
	if s.inBlock {
		s.addBlock(text)
		return nil
	}
	buf := append(s.held, text...)
	keep := -1 // held from an undecided fence on
	for from := 0; ; {
		j := bytes.Index(buf[from:], []byte(fenceOpen))
		if j < 0 {
			break
		}
		i := from + j
		switch labelEnds(buf[i+len(fenceOpen):]) {
		case no: // a fence of another label (```tool_calls_config): text
			from = i + 1
			continue
		case undecided:
			keep = len(buf) - i
		}
		if keep >= 0 {
			break
		}
		opens := s.lineStartAt(buf, i)
		if !opens {
			switch callsFollow(buf[i+len(fenceOpen):]) {
			case undecided:
				keep = len(buf) - i
			case yes:
				opens = true
			}
		}
		if keep >= 0 {
			break
		}
		if !opens {
			from = i + 1 // in a line of prose: not a block
			continue
		}
		s.out = append(s.out[:0], buf[:i]...)
		s.inBlock = true
		s.addBlock(buf[i+len(fenceOpen):])
		s.held = buf[:0]
		s.shown += len(s.out)
		return s.out
	}
	if keep < 0 {
		keep = partialFence(buf)
	}
	s.out = append(s.out[:0], buf[:len(buf)-keep]...)
	s.held = append(buf[:0], buf[len(buf)-keep:]...)
	s.shown += len(s.out)
	s.track(s.out)
	return s.out
}

// A fence after text on its line opens a block only when the calls follow
// it: '[' or '{', after whitespace (a line break or not). callsFollow reads
// what comes after such a fence: yes, no, or undecided when b ends first
// (the fence is held until it is known, up to maxLookahead bytes).
type lookahead uint8

const (
	no lookahead = iota
	yes
	undecided
)

const maxLookahead = 256

// labelEnds reads what follows the fence's label: yes when the label ends
// there, no when it goes on (a letter, digit, '_' or '-': another label),
// undecided when b is empty.
func labelEnds(b []byte) lookahead {
	if len(b) == 0 {
		return undecided
	}
	switch c := b[0]; {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		return no
	}
	return yes
}

func callsFollow(b []byte) lookahead {
	for i, c := range b {
		switch {
		case i >= maxLookahead:
			return no
		case c == '\n' || c == ' ' || c == '\t' || c == '\r':
		case c == '[' || c == '{':
			return yes
		default:
			return no
		}
	}
	if len(b) >= maxLookahead {
		return no
	}
	return undecided
}

// lineStartAt reports whether buf[i] (buf follows the released text)
// begins a line, after at most three spaces.
func (s *Scanner) lineStartAt(buf []byte, i int) bool {
	j := i
	for j > 0 && buf[j-1] == ' ' {
		j--
	}
	if j > 0 {
		return buf[j-1] == '\n' && i-j <= 3
	}
	return s.indent >= 0 && s.indent+i <= 3
}

// track follows the indentation of the released text's last line.
func (s *Scanner) track(released []byte) {
	for _, c := range released {
		switch {
		case c == '\n':
			s.indent = 0
		case c == ' ' && s.indent >= 0:
			s.indent++
		default:
			s.indent = -1
		}
	}
}

func (s *Scanner) addBlock(b []byte) {
	if s.over {
		return
	}
	if len(s.block)+len(b) > maxBlock {
		s.over = true
		s.block = nil
		return
	}
	s.block = append(s.block, b...)
}

// partialFence returns the length of the longest suffix of b that is a
// proper prefix of the opening fence.
func partialFence(b []byte) int {
	n := min(len(b), len(fenceOpen)-1)
	for ; n > 0; n-- {
		if bytes.HasPrefix([]byte(fenceOpen), b[len(b)-n:]) {
			return n
		}
	}
	return 0
}

// InBlock reports whether the opening fence has been seen.
func (s *Scanner) InBlock() bool { return s.inBlock }

// End finishes the text: tail is the held-back text to show when no block
// opened; found reports a block, whose calls or problem follow.
func (s *Scanner) End() (tail []byte, found bool, calls []Call, err error) {
	if !s.inBlock {
		return s.held, false, nil, nil
	}
	if s.over {
		return nil, true, nil, fmt.Errorf("the tool_calls block is longer than %d bytes", maxBlock)
	}
	body := s.block
	if i := closingFence(body); i >= 0 {
		body = body[:i]
	}
	calls, err = ParseBlock(body)
	return nil, true, calls, err
}

// closingFence returns where the block body b ends: the first fence
// outside a JSON string (arguments may hold Markdown, code fences
// included), or, when a string never closes, the first fence at all; -1
// for none.
func closingFence(b []byte) int {
	inStr := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && c == '`' && bytes.HasPrefix(b[i:], []byte(fenceClose)):
			return i
		}
	}
	return bytes.Index(b, []byte(fenceClose))
}

// ParseBlock parses the JSON inside a call block: an array of
// {"name", "arguments"} objects, or one such object. Arguments may be an
// object, a string holding one, or absent ({}). The error is written for
// the model: it says what to fix.
func ParseBlock(b []byte) ([]Call, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("the tool_calls block is empty")
	}
	if !jsonvalid.Bytes(b) {
		return nil, fmt.Errorf("the tool_calls block is not valid JSON")
	}
	root := gjson.ParseBytes(b)
	var items []gjson.Result
	switch {
	case root.IsObject():
		items = []gjson.Result{root}
	case root.IsArray():
		items = root.Array()
	default:
		return nil, fmt.Errorf("the tool_calls block must hold a JSON array of calls")
	}
	if len(items) == 0 {
		return nil, nil // an empty list: a reply without calls
	}
	if len(items) > maxCalls {
		return nil, fmt.Errorf("the tool_calls block holds more than %d calls", maxCalls)
	}
	calls := make([]Call, 0, len(items))
	for i, it := range items {
		c, err := parseCall(it)
		if err != nil {
			return nil, fmt.Errorf("call %d: %w", i+1, err)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

func parseCall(it gjson.Result) (Call, error) {
	if !it.IsObject() {
		return Call{}, fmt.Errorf("must be an object with name and arguments")
	}
	name := it.Get("name")
	if name.Type != gjson.String || strings.TrimSpace(name.Str) == "" {
		return Call{}, fmt.Errorf(`"name" must be the tool's name as a string`)
	}
	args := it.Get("arguments")
	raw := []byte(args.Raw)
	switch {
	case !args.Exists() || args.Type == gjson.Null:
		raw = []byte("{}")
	case args.Type == gjson.String:
		raw = []byte(args.Str)
		if !jsonvalid.Bytes(raw) || !gjson.ParseBytes(raw).IsObject() {
			return Call{}, fmt.Errorf(`"arguments" must be a JSON object`)
		}
	case !args.IsObject():
		return Call{}, fmt.Errorf(`"arguments" must be a JSON object`)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return Call{}, fmt.Errorf(`"arguments" must be a JSON object`)
	}
	return Call{Name: strings.TrimSpace(name.Str), Args: buf.Bytes()}, nil
}

// AppendBlock appends calls as the block the model is asked to write, so
// that a rendered history reads like the model's own replies. Args that
// are not a JSON object are written as a string.
func AppendBlock(dst []byte, calls []Call) []byte {
	dst = append(dst, fenceOpen+"\n["...)
	for i, c := range calls {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = append(dst, `{"name": `...)
		dst = jsonstring.Append(dst, c.Name)
		dst = append(dst, `, "arguments": `...)
		if a := bytes.TrimSpace(c.Args); jsonvalid.Bytes(a) && gjson.ParseBytes(a).IsObject() {
			dst = append(dst, a...)
		} else {
			dst = jsonstring.Append(dst, string(c.Args))
		}
		dst = append(dst, '}')
	}
	return append(dst, "]\n"+fenceClose...)
}

package anthropic

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// translator builds the system blocks and the messages of one request.
// Messages of the same role in a row are merged into one, as Anthropic
// requires roles to alternate; a tool message is a user message holding a
// tool_result block. The system and developer messages before the first
// other one are the system blocks; a later one is a user message of
// marked text blocks (systemNote).
type translator struct {
	system []block
	msgs   []message
	from   []int // by message: the index of the first chat message it holds
	i      int   // index of the chat message being read, for errors
	// orphan is the breakpoint of a blank text part left out before any
	// block of the message being read (keepMarker).
	orphan json.RawMessage
	// lastRole is the role of the last chat message read: when it is not
	// the assistant's, the translation must not end with the assistant's
	// turn (TranslateRequest).
	lastRole string
	// used counts the tool_use ids sent so far, by the id a first use
	// had; sent maps each tool call id of the calls since the last tool
	// result to the ids they were sent under, in order, for the results
	// that answer them, and last each id to the last id a result named
	// for it (uniqueID, resultID).
	used     map[string]int
	sent     map[string][]string
	last     map[string]string
	answered bool // a result came since the last call: the next call starts a new turn's calls
}

func (t *translator) at() string { return "messages[" + strconv.Itoa(t.i) + "]" }

// message translates one chat message.
func (t *translator) message(m gjson.Result) error {
	defer func() { t.i++ }()
	var blocks []block
	var err error
	role := m.Get("role").Str
	t.lastRole = role
	if role != "assistant" && role != "tool" {
		t.answered = true // a user's (or a system) turn: the next calls start a new turn's, answered or not
	}
	switch role {
	case "system", "developer":
		if blocks, err = t.textBlocks(m.Get("content"), false); err != nil {
			return err
		}
		if len(t.msgs) == 0 {
			t.blankMarkers(m, blocks)
			t.system = append(t.system, withMarker(blocks, m)...)
			return nil
		}
		// After the conversation has begun, a system message stays where
		// it was, as a note in the user turn there (systemNote).
		for i := range blocks {
			blocks[i].Text = systemNote(blocks[i].Text)
		}
		role = "user"
	case "user":
		if blocks, err = t.textBlocks(m.Get("content"), true); err != nil {
			return err
		}
	case "assistant":
		if fc := m.Get("function_call"); fc.Exists() && fc.Type != gjson.Null {
			e := pipeline.BadRequest(t.at()+".function_call", "the legacy function_call cannot be sent to this model: send tool_calls")
			e.Code = pipeline.CodeUnsupportedParameter
			return e
		}
		if blocks, err = t.textBlocks(m.Get("content"), false); err != nil {
			return err
		}
		if r := m.Get("refusal"); r.Type == gjson.String && !blank(r.Str) &&
			!slices.ContainsFunc(blocks, func(b block) bool { return b.Text == r.Str }) {
			// A refusal is what the assistant said, after its content:
			// dropped, the model would not see it (and with no content,
			// the user turns around it would merge into one). Given also
			// as a refusal part of the content, it is there already.
			blocks = append(blocks, block{Type: "text", Text: r.Str})
		}
		if blocks, err = t.toolUses(blocks, m.Get("tool_calls")); err != nil {
			return err
		}
		if hasToolUse(blocks) {
			// The tool loop's turn: its signed thinking where it was.
			blocks = withThinking(m, blocks)
		}
	case "tool":
		blocks, err = t.toolResult(m)
		if err != nil {
			return err
		}
		role = "user"
	default:
		return pipeline.BadRequest(t.at()+".role", "role %q cannot be sent to this model", role)
	}
	t.blankMarkers(m, blocks)
	t.add(role, withMarker(blocks, m))
	return nil
}

// systemNote marks a system message's text as the system's, for a user
// turn. Anthropic has a system prompt only before the messages: moved
// there, a system message from the middle of a conversation (an
// instruction from that point on) would read as applying from the start,
// would change the cached prompt prefix whenever one is added, and, sent
// last, would leave the assistant's answer as the last message, which
// Anthropic continues as a prefill.
func systemNote(text string) string { return "<system>\n" + text + "\n</system>" }

// add appends blocks to the conversation, merging them into the last
// message when it has the same role. In a user message the tool_result
// blocks come first, as Anthropic requires, and a second result for one
// call (mergeResult) joins the first; thinking blocks are kept only at
// the start of a message, so a merged message's are dropped.
func (t *translator) add(role string, blocks []block) {
	if len(blocks) == 0 {
		return
	}
	n := len(t.msgs)
	if n == 0 || t.msgs[n-1].Role != role {
		t.msgs = append(t.msgs, message{Role: role, Content: blocks})
		t.from = append(t.from, t.i)
		return
	}
	last := &t.msgs[n-1]
	for _, b := range blocks {
		if b.isThinking() {
			continue
		}
		if b.Type != "tool_result" {
			last.Content = append(last.Content, b)
			continue
		}
		k := 0 // after the results already there, before any text
		for k < len(last.Content) && last.Content[k].Type == "tool_result" {
			if last.Content[k].ToolUseID == b.ToolUseID {
				break
			}
			k++
		}
		if k < len(last.Content) && last.Content[k].Type == "tool_result" {
			mergeResult(&last.Content[k], b)
			continue
		}
		last.Content = slices.Insert(last.Content, k, b)
	}
}

// mergeResult joins b, a second tool_result for the call r answers, to r:
// Anthropic refuses two results for one tool_use_id ("each tool_use must
// have a single result"), where OpenAI takes two tool messages with the
// same tool_call_id (a history that recorded a result twice). The model
// reads both contents, in order; r is an error only when both are, and
// keeps its marker, else takes b's.
func mergeResult(r *block, b block) {
	r.Content = append(r.Content, b.Content...)
	r.IsError = r.IsError && b.IsError
	if r.CacheControl == nil {
		r.CacheControl = b.CacheControl
	}
}

// withMarker puts a message-level cache_control on the message's last
// block, unless a block already carries one.
func withMarker(blocks []block, m gjson.Result) []block {
	cc := marker(m)
	if cc == nil || len(blocks) == 0 || blocks[len(blocks)-1].CacheControl != nil {
		return blocks
	}
	blocks[len(blocks)-1].CacheControl = cc
	return blocks
}

// textBlocks translates content (a string or a list of parts) into text
// blocks, and image blocks when images are allowed. Empty texts are left
// out: Anthropic refuses empty text blocks.
func (t *translator) textBlocks(content gjson.Result, images bool) ([]block, error) {
	if content.Type == gjson.String {
		if blank(content.Str) {
			return nil, nil
		}
		return []block{{Type: "text", Text: content.Str}}, nil
	}
	if !content.IsArray() {
		if content.Exists() && content.Type != gjson.Null {
			return nil, pipeline.BadRequest(t.at()+".content", "content must be a string or a list of parts")
		}
		return nil, nil // no content: an assistant message with only tool calls
	}
	var out []block
	var err error
	j := 0
	content.ForEach(func(_, p gjson.Result) bool {
		at := t.at() + ".content[" + strconv.Itoa(j) + "]"
		j++
		switch typ := p.Get("type").Str; {
		case typ == "text" || typ == "refusal":
			key := typ
			if s := p.Get(key).Str; !blank(s) {
				out = append(out, block{Type: "text", Text: s, CacheControl: marker(p)})
			} else if cc := marker(p); cc != nil {
				t.keepMarker(out, cc)
			}
		case typ == "image_url" && images:
			var b block
			if b, err = imageBlock(p.Get("image_url.url").Str, at); err != nil {
				return false
			}
			b.CacheControl = marker(p)
			out = append(out, b)
		default:
			err = pipeline.BadRequest(at+".type", "content part type %q cannot be sent to this model", typ)
			return false
		}
		return true
	})
	return out, err
}

// keepMarker keeps cc, the breakpoint of a text left out (blank), on the
// block before it: out's last, or when out is empty the message's caller
// decides (orphan: a tool result takes it, any other message puts it on
// the block before the message, markBefore). The prefix it marked is
// cached as it would have been.
func (t *translator) keepMarker(out []block, cc json.RawMessage) {
	switch {
	case len(out) > 0:
		if out[len(out)-1].CacheControl == nil {
			out[len(out)-1].CacheControl = cc
		}
	case t.orphan == nil:
		t.orphan = cc
	}
}

// blankMarkers places the breakpoints of text left out as blank before any
// of message m's blocks, and of m itself when it is left out whole
// (blocks, its translation, is empty): they mark the prompt up to the
// block before it (markBefore). Call it before m's blocks are added.
func (t *translator) blankMarkers(m gjson.Result, blocks []block) {
	if cc := t.orphan; cc != nil {
		t.orphan = nil
		t.markBefore(cc)
	}
	if cc := marker(m); cc != nil && len(blocks) == 0 {
		t.markBefore(cc)
	}
}

// markBefore puts cc on the last block translated so far, a message's or,
// before the first message, the system prompt's, unless it has one.
func (t *translator) markBefore(cc json.RawMessage) {
	if len(t.msgs) > 0 {
		t.msgs = keepBreakpoint(t.msgs, cc)
		return
	}
	if n := len(t.system); n > 0 && t.system[n-1].CacheControl == nil {
		t.system[n-1].CacheControl = cc
	}
}

// blank reports whether s is empty or only white space: Anthropic refuses
// a text block that is ("text content blocks must contain non-whitespace
// text"), where OpenAI takes it (a model's answer of "\n", a blank user
// turn), so it is left out as an empty one is.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// imageBlock reads an image URL: a base64 data URL (its media type in
// lower case, image/jpg as image/jpeg), or an http(s) URL that Anthropic
// fetches itself.
func imageBlock(url, at string) (block, error) {
	// Schemes and the base64 marker are case-insensitive (RFC 3986 3.1,
	// RFC 2397): OpenAI reads DATA:...;BASE64, and HTTPS:// URLs.
	if hasPrefixFold(url, "data:") {
		meta, data, ok := strings.Cut(url[len("data:"):], ",")
		isBase64 := len(meta) >= len(";base64") && strings.EqualFold(meta[len(meta)-len(";base64"):], ";base64")
		media := meta
		if isBase64 {
			media = meta[:len(meta)-len(";base64")]
		}
		if !ok || !isBase64 || strings.TrimSpace(strings.Split(media, ";")[0]) == "" || data == "" {
			return block{}, pipeline.BadRequest(at+".image_url.url", "an image data URL must be data:<media type>;base64,<data>")
		}
		// Parameters a data URL may carry before ;base64 (a file name from
		// some SDKs: data:image/png;name=cat.png;base64,...) are not part of
		// the media type Anthropic checks.
		media, _, _ = strings.Cut(media, ";")
		if media = strings.TrimSpace(strings.ToLower(media)); media == "image/jpg" {
			media = "image/jpeg" // a common misspelling OpenAI reads; Anthropic takes only image/jpeg
		}
		return block{Type: "image", Source: &source{Type: "base64", MediaType: media, Data: data}}, nil
	}
	if hasPrefixFold(url, "https://") || hasPrefixFold(url, "http://") {
		return block{Type: "image", Source: &source{Type: "url", URL: url}}, nil
	}
	return block{}, pipeline.BadRequest(at+".image_url.url", "an image must be a data URL or an http(s) URL")
}

// hasPrefixFold reports whether s begins with prefix, in any case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// toolUses appends a tool_use block per tool call. Arguments must be a JSON
// object (or empty, which is {}).
func (t *translator) toolUses(blocks []block, calls gjson.Result) ([]block, error) {
	if !calls.IsArray() {
		return blocks, nil
	}
	var err error
	j := 0
	calls.ForEach(func(_, c gjson.Result) bool {
		at := t.at() + ".tool_calls[" + strconv.Itoa(j) + "]"
		j++
		id, name := c.Get("id").Str, c.Get("function.name").Str
		if id == "" || name == "" {
			err = pipeline.BadRequest(at, "a tool call needs an id and a function name")
			return false
		}
		input := json.RawMessage(`{}`)
		if args := strings.TrimSpace(c.Get("function.arguments").Str); args != "" {
			if !jsonvalid.String(args) || !gjson.Parse(args).IsObject() {
				err = pipeline.BadRequest(at+".function.arguments", "tool call arguments must be a JSON object")
				return false
			}
			input = json.RawMessage(args)
		}
		blocks = append(blocks, block{Type: "tool_use", ID: t.uniqueID(id), Name: name, Input: input, CacheControl: marker(c)})
		return true
	})
	return blocks, err
}

// uniqueID is the id a tool call with id is sent under: toolID's, made
// unique in the request with a suffix when an earlier call had it.
// Anthropic refuses a request whose tool_use ids repeat ("tool_use ids
// must be unique"), where OpenAI takes a history that reuses one (servers
// that number their calls call_0, call_1 in every turn; two calls of one
// turn under one id). The results that follow take the ids in order
// (resultID).
func (t *translator) uniqueID(id string) string {
	base := toolID(id)
	if t.used == nil {
		t.used, t.sent, t.last = map[string]int{}, map[string][]string{}, map[string]string{}
	}
	if t.answered {
		// The results that follow answer the calls from here on (an
		// assistant turn may come in several messages, or hold an empty
		// tool_calls between).
		t.answered = false
		clear(t.sent)
	}
	out := base
	for n := t.used[base]; t.used[out] > 0; {
		n++
		out = base + "_" + strconv.Itoa(n)
		t.used[base] = n
	}
	t.used[out]++
	t.sent[id] = append(t.sent[id], out)
	return out
}

// resultID is the tool_use id a tool result answering id names: the next
// of the ids the latest turn's calls with id were sent under; when none is
// left, the one the last result for id named (a second result for one
// call, which add merges), or toolID's (a result that answers no call).
func (t *translator) resultID(id string) string {
	t.answered = true
	if q := t.sent[id]; len(q) > 0 {
		t.sent[id] = q[1:]
		t.last[id] = q[0]
		return q[0]
	}
	if out, ok := t.last[id]; ok {
		return out
	}
	return toolID(id)
}

// toolResult translates a tool message into one tool_result block. A
// marker on the content moves to the block; a result in the gateway's
// error envelope ({"status":"error",...}) is sent with is_error.
func (t *translator) toolResult(m gjson.Result) ([]block, error) {
	id := m.Get("tool_call_id").Str
	if id == "" {
		return nil, pipeline.BadRequest(t.at()+".tool_call_id", "a tool message needs a tool_call_id")
	}
	content, err := t.textBlocks(m.Get("content"), true)
	if err != nil {
		return nil, err
	}
	b := block{Type: "tool_result", ToolUseID: t.resultID(id), CacheControl: t.orphan} // a blank part's breakpoint: the result's
	t.orphan = nil
	var text strings.Builder
	for i := range content {
		if content[i].CacheControl != nil {
			b.CacheControl, content[i].CacheControl = content[i].CacheControl, nil
		}
		text.WriteString(content[i].Text)
	}
	b.Content = content
	b.IsError = isErrorResult(text.String())
	return []block{b}, nil
}

// isErrorResult reports whether a tool result is the gateway's error
// envelope.
func isErrorResult(s string) bool {
	return strings.HasPrefix(strings.TrimSpace(s), "{") && jsonvalid.String(s) && gjson.Get(s, "status").Str == "error"
}

// toolID is a tool call id as Anthropic accepts one (^[a-zA-Z0-9_-]+$):
// every other byte becomes '_', and a short hash of the id is appended so
// that two ids that differ only there ("call.A", "call:A") stay two. Ids
// another provider minted (a fallback turn's, "functions.get_weather:0")
// would fail the request; a call and its result map alike, so they still
// pair.
func toolID(id string) string {
	valid := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	for i := 0; i < len(id); i++ {
		if !valid(id[i]) {
			b := []byte(id)
			for j := i; j < len(b); j++ {
				if !valid(b[j]) {
					b[j] = '_'
				}
			}
			h := fnv.New32a()
			h.Write([]byte(id))
			return string(fmt.Appendf(b, "_%08x", h.Sum32()))
		}
	}
	return id
}

package contextedit

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/pipeline"
)

// transcript is the parsed messages array of one request and the edits
// decided for it. It reads one string copy of the body (gjson.ParseBytes) and
// never writes it; build produces a new body. Not safe for concurrent use.
type transcript struct {
	c     *Counter // nil when only applying edits (EditLog.Apply)
	root  gjson.Result
	tools gjson.Result
	msgs  []message

	// changed reports an edit that alters bytes: clearing content that is not
	// already the placeholder, blanking arguments that are not already blank,
	// dropping a message.
	changed bool

	// inserts are messages (raw JSON) to write before msgs[i]: the summary
	// of the turns dropped before i.
	inserts map[int]string
}

// moved reports whether the built array's indices differ from the
// body's: a message dropped or a summary put in.
func (t *transcript) moved() bool {
	if len(t.inserts) > 0 {
		return true
	}
	for i := range t.msgs {
		if t.msgs[i].dropped {
			return true
		}
	}
	return false
}

// message is one entry of messages with its edit state. It holds the
// message's JSON and its content's as strings (views of the body), not as
// gjson.Results (80 bytes each): a body of many short messages costs a
// transcript a few times its size, not tens of times.
type message struct {
	raw     string // the message's JSON
	role    string
	content string // the content's JSON; "" when absent
	calls   []call // assistant tool calls

	callID    string // tool: tool_call_id
	name      string // tool: the tool's name, from its call or the message
	owner     int32  // tool: index of the assistant message holding the call, or -1
	ownerCall int32  // tool: index in msgs[owner].calls

	clear       bool // content replaced by placeholder
	dropped     bool
	placeholder string

	cost       int32 // cookbook tokens of the message as received; -1 = not counted yet
	contentTok int32 // tokens of the content as received; -1 = not counted yet
	saved      int32 // tokens removed by the edits on this message
}

// call is one entry of an assistant message's tool_calls.
type call struct {
	idx    int32 // index in tool_calls
	custom bool  // a custom tool call: input instead of function.arguments
	blank  bool  // input replaced by "{}" (custom: "")
	id     string
	name   string
	input  string // function.arguments or custom.input, as JSON; "" when absent
}

// isString reports whether raw (a JSON value) is the string s.
func isString(raw, s string) bool {
	v := gjson.Parse(raw)
	return v.Type == gjson.String && v.Str == s
}

func isSystem(role string) bool { return role == "system" || role == "developer" }

// parse reads body's messages. It fails with ErrInvalidBody when body is not
// an object with a messages array.
func parse(body []byte, c *Counter) (*transcript, error) {
	root := gjson.ParseBytes(body)
	msgs, tools, err := promptParts(root)
	if err != nil {
		return nil, err
	}
	t := &transcript{c: c, root: root, tools: tools}
	n := 0
	msgs.ForEach(func(_, _ gjson.Result) bool { n++; return true })
	t.msgs = make([]message, 0, n) // one allocation of the final size
	calls := map[string][2]int32{} // call id → (message, call) of the latest assistant holding it
	msgs.ForEach(func(_, v gjson.Result) bool {
		i := int32(len(t.msgs))
		m := message{raw: v.Raw, owner: -1, cost: -1, contentTok: -1}
		var toolCalls, name gjson.Result
		v.ForEach(func(k, f gjson.Result) bool {
			switch k.Str {
			case "role":
				m.role = f.Str
			case "content":
				m.content = f.Raw
			case "tool_call_id":
				m.callID = f.Str
			case "name":
				name = f
			case "tool_calls":
				toolCalls = f
			}
			return true
		})
		switch m.role {
		case "assistant":
			if toolCalls.IsArray() {
				toolCalls.ForEach(func(k, tc gjson.Result) bool {
					cl := call{idx: int32(len(m.calls)), id: tc.Get("id").Str}
					if f := tc.Get("function"); f.IsObject() {
						cl.name, cl.input = f.Get("name").Str, f.Get("arguments").Raw
					} else if cu := tc.Get("custom"); cu.IsObject() {
						cl.name, cl.input, cl.custom = cu.Get("name").Str, cu.Get("input").Raw, true
					}
					if cl.id != "" {
						calls[cl.id] = [2]int32{i, int32(len(m.calls))}
					}
					m.calls = append(m.calls, cl)
					return true
				})
			}
		case "tool":
			if loc, ok := calls[m.callID]; ok && m.callID != "" {
				m.owner, m.ownerCall = loc[0], loc[1]
				m.name = t.msgs[loc[0]].calls[loc[1]].name
			}
			if m.name == "" {
				m.name = name.Str
			}
		}
		t.msgs = append(t.msgs, m)
		return true
	})
	return t, nil
}

// promptParts returns the messages array and the tools of a chat request
// (the first of each key), or ErrInvalidBody when root is not an object
// with a messages array.
func promptParts(root gjson.Result) (msgs, tools gjson.Result, err error) {
	if !root.IsObject() {
		return msgs, tools, ErrInvalidBody
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "messages":
			if !msgs.Exists() {
				msgs = v
			}
		case "tools":
			if !tools.Exists() {
				tools = v
			}
		}
		return true
	})
	if !msgs.IsArray() {
		return msgs, tools, ErrInvalidBody
	}
	return msgs, tools, nil
}

// cost returns the tokens message i adds to the prompt with its edits.
func (t *transcript) cost(i int) int {
	m := &t.msgs[i]
	if m.cost < 0 {
		m.cost = int32(t.c.messageCost(gjson.Parse(m.raw)))
	}
	return int(m.cost - m.saved)
}

// contentTokens returns the tokens of message i's content as received.
func (t *transcript) contentTokens(i int) int {
	m := &t.msgs[i]
	if m.contentTok < 0 {
		m.contentTok = int32(t.c.contentCost(gjson.Parse(m.content)))
	}
	return int(m.contentTok)
}

// count returns the prompt tokens of the edited transcript. With a hint, the
// first h.Messages messages count h.Tokens (as the upstream reported them
// for the previous round, edits included) and only the rest is counted.
func (t *transcript) count(h pipeline.PromptHint) int {
	start, n := 0, tokensPriming+t.c.toolsCost(t.tools)
	if h.Tokens > 0 && h.Messages > 0 && h.Messages <= len(t.msgs) {
		start, n = h.Messages, h.Tokens
	}
	for i := start; i < len(t.msgs); i++ {
		if !t.msgs[i].dropped {
			n += t.cost(i)
		}
	}
	return n
}

// clearSaving returns the tokens clearing tool message i would save, without
// clearing it. It needs a Counter.
func (t *transcript) clearSaving(i int, placeholder string, inputs bool) int {
	m := &t.msgs[i]
	s := t.contentTokens(i) - t.c.CountText(placeholder)
	if inputs && m.owner >= 0 {
		if cl := &t.msgs[m.owner].calls[m.ownerCall]; !cl.blank {
			s += t.c.countString(gjson.Parse(cl.input)) - t.c.CountText(blankInput(cl.custom))
		}
	}
	return s
}

// clear replaces tool message i's content with placeholder and, with inputs,
// blanks the arguments of its call. With a Counter it returns the tokens
// saved, else 0.
func (t *transcript) clear(i int, placeholder string, inputs bool) int {
	m := &t.msgs[i]
	if m.clear {
		return 0
	}
	saved := 0
	m.clear, m.placeholder = true, placeholder
	if !isString(m.content, placeholder) {
		t.changed = true
	}
	if t.c != nil {
		s := t.contentTokens(i) - t.c.CountText(placeholder)
		m.saved += int32(s)
		saved += s
	}
	if !inputs || m.owner < 0 {
		return saved
	}
	o := &t.msgs[m.owner]
	cl := &o.calls[m.ownerCall]
	if cl.blank {
		return saved
	}
	cl.blank = true
	if !isString(cl.input, blankInput(cl.custom)) {
		t.changed = true
	}
	if t.c != nil {
		s := t.c.countString(gjson.Parse(cl.input)) - t.c.CountText(blankInput(cl.custom))
		o.saved += int32(s)
		saved += s
	}
	return saved
}

func blankInput(custom bool) string {
	if custom {
		return ""
	}
	return "{}"
}

// build returns a new body with the edits applied; body is not modified.
// Only the messages array is rewritten; every other byte is kept.
func (t *transcript) build(body []byte) ([]byte, error) {
	arr := make([]byte, 0, len(t.root.Raw))
	arr = append(arr, '[')
	first := true
	for i := range t.msgs {
		m := &t.msgs[i]
		if ins, ok := t.inserts[i]; ok {
			if !first {
				arr = append(arr, ',')
			}
			first = false
			arr = append(arr, ins...)
		}
		if m.dropped {
			continue
		}
		raw := m.raw
		var err error
		if m.clear {
			if raw, err = sjson.Set(raw, "content", m.placeholder); err != nil {
				return nil, err
			}
		}
		for _, cl := range m.calls {
			if !cl.blank {
				continue
			}
			path := "tool_calls." + strconv.Itoa(int(cl.idx)) + ".function.arguments"
			if cl.custom {
				path = "tool_calls." + strconv.Itoa(int(cl.idx)) + ".custom.input"
			}
			if raw, err = sjson.Set(raw, path, blankInput(cl.custom)); err != nil {
				return nil, err
			}
		}
		if !first {
			arr = append(arr, ',')
		}
		first = false
		arr = append(arr, raw...)
	}
	arr = append(arr, ']')
	return sjson.SetRawBytes(body, "messages", arr)
}

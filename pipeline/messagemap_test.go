package pipeline

import (
	"strconv"
	"strings"
	"testing"
)

// TestClientParam: an index into the upstream's messages becomes the
// client's, in each spelling providers use; a message the gateway added,
// or a rewritten array, leaves "messages"; anything else is kept.
func TestClientParam(t *testing.T) {
	t.Parallel()
	shifted := MessageMap{Prepended: 1}
	looped := MessageMap{Prepended: 1, Client: 2}
	edited := MessageMap{Rewritten: true}
	for _, c := range []struct {
		m          MessageMap
		param, out string
	}{
		{MessageMap{}, "messages.[3].content", "messages.[3].content"},
		{shifted, "messages.[3].content", "messages.[2].content"},
		{shifted, "messages[3].content", "messages[2].content"},
		{shifted, "messages.3.content", "messages.2.content"},
		{shifted, "messages.[1]", "messages.[0]"},
		{shifted, "messages[12][0]", "messages[11][0]"},
		{shifted, "messages.[0].content", "messages"}, // the gateway's own system message
		{looped, "messages.[2].role", "messages.[1].role"},
		{looped, "messages.[3].role", "messages"}, // the loop's history
		{edited, "messages.[0].content", "messages"},
		{shifted, "messages", "messages"},
		{shifted, "model", "model"},
		{shifted, "", ""},
		{shifted, "messages.content", "messages.content"},
		{shifted, "messages.[x]", "messages.[x]"},
		{shifted, "messages.[3", "messages.[3"},
		{shifted, "messages.3x", "messages.3x"},
		{shifted, "messagesX.[3]", "messagesX.[3]"},
		{shifted, "messages.[99999999999999999999]", "messages.[99999999999999999999]"},
		{shifted, "tools.[3].function", "tools.[3].function"},
	} {
		if got := c.m.ClientParam(c.param); got != c.out {
			t.Errorf("%+v: ClientParam(%q) = %q, want %q", c.m, c.param, got, c.out)
		}
	}
}

// TestMessageMapRecords: layers compose: prepends add up, the first
// layer that appends knows the client's count, a rewrite stays.
func TestMessageMapRecords(t *testing.T) {
	t.Parallel()
	var m MessageMap
	m.Prepend(1)
	m.Append(3)
	m.Append(5) // a later round: the client's count is the first one's
	m.Prepend(1)
	if m != (MessageMap{Prepended: 2, Client: 3}) {
		t.Fatalf("%+v", m)
	}
	m.Rewrite()
	if got := m.ClientParam("messages.[2]"); got != "messages" {
		t.Fatalf("rewritten: %q", got)
	}
}

// FuzzClientParam: no param or text panics the mapping; an arbitrary param
// it changes is the same text with the index lowered by the prepended
// messages, to one of the client's; a param built from an index in each
// spelling maps to exactly the expected one, and the text quoting it names
// the same.
func FuzzClientParam(f *testing.F) {
	for _, s := range []string{"messages.[3].content", "messages[0]", "messages.12.x", "messages.[", "messages[]", "messages.9999999999"} {
		f.Add(s, uint16(3), uint8(0), ".content", 1, 0, false)
	}
	f.Fuzz(func(t *testing.T, param string, idx uint16, form uint8, tail string, pre, client int, rewritten bool) {
		m := MessageMap{Prepended: int32(pre % 4), Client: int32(client % 8), Rewritten: rewritten}
		if m.Prepended < 0 || m.Client < 0 {
			return
		}
		_ = m.ClientText(param)
		if got := m.ClientParam(param); got != param && got != "messages" {
			n, ok := shiftedIndex(param, got, int(m.Prepended))
			if m.Rewritten || !ok || n < 0 || (m.Client > 0 && n >= int(m.Client)) {
				t.Fatalf("%+v: %q became %q", m, param, got)
			}
		}
		// Built: messages + an index in one of the three spellings + a
		// tail that cannot continue the index.
		if tail != "" && (tail[0] >= '0' && tail[0] <= '9' || isWordByte(tail[0])) {
			return
		}
		forms := [3][2]string{{".[", "]"}, {"[", "]"}, {".", ""}}
		fm := forms[int(form)%3]
		ref := func(i int) string { return "messages" + fm[0] + strconv.Itoa(i) + fm[1] }
		built := ref(int(idx)) + tail
		want := "messages"
		if i := int(idx) - int(m.Prepended); !m.Rewritten && i >= 0 && (m.Client == 0 || i < int(m.Client)) {
			want = ref(i) + tail
		}
		if m == (MessageMap{}) {
			want = built
		}
		if got := m.ClientParam(built); got != want {
			t.Fatalf("%+v: %q became %q, want %q", m, built, got, want)
		}
		if want != "messages" && !strings.Contains(m.ClientText("Invalid '"+built+"': no."), want) {
			t.Fatalf("%+v: the text quoting %q does not name %q: %q", m, built, want, m.ClientText("Invalid '"+built+"': no."))
		}
	})
}

// TestClientText: a message quoting the param names the client's message
// too, and one the client cannot see by the array's name alone.
func TestClientText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m         MessageMap
		text, out string
	}{
		{MessageMap{Prepended: 1}, "Missing required parameter: 'messages.[2].tool_calls[].id'.", "Missing required parameter: 'messages.[1].tool_calls[].id'."},
		{MessageMap{Prepended: 1}, "Invalid 'messages[3].content' and messages[4]: bad", "Invalid 'messages[2].content' and messages[3]: bad"},
		{MessageMap{Prepended: 1}, "Invalid 'messages.[0].content': x", "Invalid 'messages': x"},
		{MessageMap{Rewritten: true, Input: true}, "Invalid 'messages.[2].role': x", "Invalid 'input': x"},
		{MessageMap{Prepended: 1}, "my_messages.[3] and messages are fine", "my_messages.[3] and messages are fine"},
		{MessageMap{}, "Invalid 'messages.[2]'", "Invalid 'messages.[2]'"},
	} {
		if got := c.m.ClientText(c.text); got != c.out {
			t.Errorf("%+v: ClientText(%q) = %q, want %q", c.m, c.text, got, c.out)
		}
	}
	if got := (MessageMap{Rewritten: true, Input: true}).ClientParam("messages"); got != "input" {
		t.Errorf("a Responses request's messages param: %q", got)
	}
}

// shiftedIndex reports whether got is param with its first run of digits
// after "messages" lowered by shift, and returns got's index.
func shiftedIndex(param, got string, shift int) (int, bool) {
	digits := func(s string) (int, int) {
		i := len("messages")
		for i < len(s) && (s[i] < '0' || s[i] > '9') {
			i++
		}
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return i, j
	}
	if len(param) < len("messages") || len(got) < len("messages") {
		return 0, false
	}
	pi, pj := digits(param)
	gi, gj := digits(got)
	pn, err1 := strconv.Atoi(param[pi:pj])
	gn, err2 := strconv.Atoi(got[gi:gj])
	return gn, err1 == nil && err2 == nil && param[:pi] == got[:gi] && param[pj:] == got[gj:] && gn == pn-shift
}

// A Responses request's refusal names the Responses field the chat field
// was translated from; a chat request's keeps the chat name.
func TestClientParamResponsesFields(t *testing.T) {
	in := MessageMap{Rewritten: true, Input: true}
	for param, want := range map[string]string{
		"logprobs":                           "include",
		"max_completion_tokens":              "max_output_tokens",
		"max_tokens":                         "max_output_tokens",
		"reasoning_effort":                   "reasoning.effort",
		"verbosity":                          "text.verbosity",
		"tools[3].function.name":             "tools",
		"tools.3":                            "tools",
		"tool_choice.function.name":          "tool_choice",
		"response_format":                    "text.format",
		"response_format.json_schema.schema": "text.format.schema",
		"response_format.type":               "text.format.type",
		"messages[2].content":                "input",
		"temperature":                        "temperature",
		"logprobsx":                          "logprobsx",
	} {
		if got := in.ClientParam(param); got != want {
			t.Errorf("%q: got %q, want %q", param, got, want)
		}
	}
	if got := (MessageMap{Prepended: 1}).ClientParam("logprobs"); got != "logprobs" {
		t.Errorf("chat: %q", got)
	}
	err := (MessageMap{Rewritten: true, Input: true}).ClientError(BadRequest("messages[1].content[0].type", "bad part at messages[1].content[0]"))
	if e := err.(*Error); e.Param != "input" || e.Message != "bad part at input" {
		t.Errorf("ClientError: %+v", e)
	}
}

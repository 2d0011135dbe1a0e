package anthropic

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// MaxBreakpoints is Anthropic's limit of cache_control blocks per request.
const MaxBreakpoints = 4

// DefaultMaxTokens is the max_tokens sent when neither the client nor the
// model's config sets one: the Messages API requires it.
const DefaultMaxTokens = 4096

// thinkingBudgets maps reasoning_effort to a thinking budget in tokens.
// xhigh and max, which the current SDKs offer, take high's: the largest
// budget whose grown max_tokens stays under the output limit of every
// current Claude model.
var thinkingBudgets = map[string]int64{"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 16384, "max": 16384}

// RequestOptions are what a translation needs besides the chat body.
type RequestOptions struct {
	Model     string // the upstream model name
	MaxTokens int    // sent when the client sets none; 0 = DefaultMaxTokens
}

// The Messages request, as much of it as a chat request can say. Field
// order follows Anthropic's documentation, so that a request reads as its
// examples do.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int64           `json:"max_tokens"`
	System        []block         `json:"system,omitempty"`
	Messages      []message       `json:"messages"`
	Tools         []tool          `json:"tools,omitempty"`
	ToolChoice    *toolChoice     `json:"tool_choice,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	Thinking      json.RawMessage `json:"thinking,omitempty"`
	Metadata      *metadata       `json:"metadata,omitempty"`
	OutputConfig  *outputConfig   `json:"output_config,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is every content block kind the translation writes; each kind
// fills only its own fields.
type block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`          // text
	Source       *source         `json:"source,omitempty"`        // image
	ID           string          `json:"id,omitempty"`            // tool_use
	Name         string          `json:"name,omitempty"`          // tool_use
	Input        json.RawMessage `json:"input,omitempty"`         // tool_use
	ToolUseID    string          `json:"tool_use_id,omitempty"`   // tool_result
	Content      []block         `json:"content,omitempty"`       // tool_result
	IsError      bool            `json:"is_error,omitempty"`      // tool_result
	Thinking     *string         `json:"thinking,omitempty"`      // thinking (its text may be empty)
	Signature    string          `json:"signature,omitempty"`     // thinking
	Data         string          `json:"data,omitempty"`          // redacted_thinking
	CacheControl json.RawMessage `json:"cache_control,omitempty"` // any
}

type source struct {
	Type      string `json:"type"` // base64 | url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Strict: the arguments must match the schema (OpenAI's
	// function.strict; Anthropic's structured outputs for tools).
	Strict       bool            `json:"strict,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type toolChoice struct {
	Type                   string `json:"type"` // auto | any | tool | none
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

type metadata struct {
	UserID string `json:"user_id"`
}

// outputConfig carries a structured output's JSON schema.
type outputConfig struct {
	Format outputFormat `json:"format"`
}

type outputFormat struct {
	Type   string          `json:"type"` // json_schema
	Schema json.RawMessage `json:"schema"`
}

// TranslateRequest returns the Messages request for the chat request body
// (validated JSON, as the pipeline holds it). A chat request that Anthropic
// cannot express is a *pipeline.Error (400) naming the offending field.
// body is only read; the result is a new slice.
func TranslateRequest(body []byte, opts RequestOptions) ([]byte, error) {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, pipeline.BadRequest("", "the request body must be a JSON object")
	}
	out := messagesRequest{Model: opts.Model, Stream: root.Get("stream").Bool()}
	if err := unsupported(root); err != nil {
		return nil, err
	}
	var t translator
	var err error
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		err = t.message(m)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if n := len(t.msgs); t.lastRole != "assistant" && n > 0 && t.msgs[n-1].Role == "assistant" {
		// The messages after the last answer were left out as blank:
		// that answer last, Anthropic would continue it as a prefill,
		// another answer than asked.
		return nil, pipeline.BadRequest("messages["+strconv.Itoa(t.i-1)+"].content",
			"the last message is only white space, which this model does not accept")
	}
	t.msgs = trimPrefill(t.msgs)
	if len(t.msgs) == 0 {
		return nil, pipeline.BadRequest("messages", "at least one user or assistant message is required")
	}
	out.System, out.Messages = t.system, t.msgs
	if rf := root.Get("response_format"); rf.Get("type").Str == "json_object" ||
		(rf.Get("type").Str == "json_schema" && !rf.Get("json_schema.schema").Exists()) {
		// A json_schema without a schema (OpenAI's allows it) asks for
		// JSON of no given shape: as json_object.
		out.System = append(out.System, block{Type: "text", Text: jsonObjectInstruction})
	}
	if out.Tools, err = translateTools(root.Get("tools")); err != nil {
		return nil, err
	}
	tc := root.Get("tool_choice")
	if tc.Get("type").Str == "allowed_tools" {
		// Anthropic has no allowed list: the tools offered are the
		// allowed ones, chosen as its mode says.
		out.Tools, tc = allowedTools(out.Tools, tc.Get("allowed_tools"))
	}
	if len(out.Tools) > 0 {
		if out.ToolChoice, err = translateToolChoice(tc, root.Get("parallel_tool_calls")); err != nil {
			return nil, err
		}
		if out.ToolChoice != nil && out.ToolChoice.Type == "tool" && !slices.ContainsFunc(out.Tools, func(t tool) bool { return t.Name == out.ToolChoice.Name }) {
			return nil, pipeline.BadRequest("tool_choice", "tool_choice names the function %q, which tools does not offer", out.ToolChoice.Name)
		}
	} else if err := choiceWithoutTools(root.Get("tool_choice")); err != nil {
		return nil, err
	}
	if len(out.Tools) == 0 {
		// Anthropic refuses tool_use and tool_result blocks in a request
		// without tools ("must define tools"), where OpenAI takes a
		// history of calls without them (a summary or compaction turn):
		// the history's tools are declared, and none may be called.
		if out.Tools = historyTools(out.Messages); len(out.Tools) > 0 {
			out.ToolChoice = &toolChoice{Type: "none"}
		}
	}
	capBreakpoints(&out)
	if err := checkMaxTokens(root); err != nil {
		return nil, err
	}
	if err := checkSettings(root); err != nil {
		return nil, err
	}
	out.MaxTokens = maxTokens(root, opts.MaxTokens)
	out.StopSequences = stopSequences(root.Get("stop"))
	if err := setSampling(&out, root); err != nil {
		return nil, err
	}
	for _, k := range [...]string{"user", "safety_identifier"} {
		if u := root.Get(k); u.Type == gjson.String && u.Str != "" {
			out.Metadata = &metadata{UserID: u.Str}
			break
		}
	}
	if out.OutputConfig, err = outputFormatOf(root.Get("response_format")); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&out); err != nil {
		return nil, pipeline.BadRequest("", "the request cannot be sent to this model")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// unsupported refuses what Anthropic cannot answer and a client would
// otherwise get silently without: more than one choice (n other than 1),
// token logprobs (logprobs true, top_logprobs > 0), a logit_bias, a
// presence or frequency penalty, audio output, a web search, and the
// legacy functions and function_call (which the chat form still takes:
// send them as tools). Each is a 400 with the code
// unsupported_parameter, naming the field. A seed (best effort on OpenAI
// too) and a prediction (a speed-up) are not sent, and change nothing
// the client can hold the answer to.
func unsupported(root gjson.Result) error {
	refuse := func(param, msg string) error {
		e := pipeline.BadRequest(param, "%s", msg)
		e.Code = pipeline.CodeUnsupportedParameter
		return e
	}
	set := func(v gjson.Result) bool { return v.Exists() && v.Type != gjson.Null }
	if n := root.Get("n"); set(n) && (n.Type != gjson.Number || n.Num != 1) {
		return refuse("n", "this model returns one choice: n must be 1")
	}
	if root.Get("logprobs").Type == gjson.True {
		return refuse("logprobs", "this model returns no logprobs: logprobs must be false")
	}
	if t := root.Get("top_logprobs"); t.Type == gjson.Number && t.Float() > 0 {
		return refuse("top_logprobs", "this model returns no logprobs: top_logprobs must be 0")
	}
	if lb := root.Get("logit_bias"); set(lb) && (!lb.IsObject() || len(lb.Map()) > 0) {
		return refuse("logit_bias", "this model takes no logit_bias")
	}
	for _, k := range [...]string{"presence_penalty", "frequency_penalty"} {
		if v := root.Get(k); set(v) && (v.Type != gjson.Number || v.Num != 0) {
			return refuse(k, "this model takes no "+k+": it must be 0")
		}
	}
	audio := false
	root.Get("modalities").ForEach(func(_, m gjson.Result) bool {
		audio = m.Str == "audio"
		return !audio
	})
	if audio || set(root.Get("audio")) {
		return refuse("modalities", "this model answers in text only: audio output is not available")
	}
	if set(root.Get("web_search_options")) {
		return refuse("web_search_options", "this model cannot search the web here")
	}
	for _, k := range [...]string{"functions", "function_call"} {
		if set(root.Get(k)) {
			return refuse(k, "the legacy "+k+" field is not supported for this model: send tools and tool_choice")
		}
	}
	return nil
}

// maxTokens is the client's max_completion_tokens or max_tokens, else the
// model's default.
func maxTokens(root gjson.Result, def int) int64 {
	if v := clientMaxTokens(root); v > 0 {
		return v
	}
	if def > 0 {
		return int64(def)
	}
	return DefaultMaxTokens
}

// checkMaxTokens refuses a max_completion_tokens or max_tokens that is not
// a whole number of at least 1, as OpenAI does: Anthropic requires
// max_tokens, and one taken for unset would send the model's default, an
// answer far longer (and dearer) than the client allowed.
func checkMaxTokens(root gjson.Result) error {
	for _, k := range [...]string{"max_completion_tokens", "max_tokens"} {
		v := root.Get(k)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if !wire.Integer(v) {
			return pipeline.BadRequest(k, "%s must be an integer", k)
		}
		if v.Num < 1 {
			return pipeline.BadRequest(k, "%s must be at least 1", k)
		}
	}
	return nil
}

// samplingRanges are OpenAI's ranges of the sampling settings that are
// translated (temperature is then capped at Anthropic's 1).
var samplingRanges = [...]struct {
	key      string
	min, max float64
}{{"temperature", 0, 2}, {"top_p", 0, 1}}

// checkSettings refuses a translated setting of the wrong type, or out of
// OpenAI's range, as OpenAI does (null is each one's default). Read only
// when of the right type, it was dropped: "temperature":"0.2" ran at
// Anthropic's default, "parallel_tool_calls":"false" let the model call in
// parallel, a stop list of numbers sent no stop sequences.
func checkSettings(root gjson.Result) error {
	for _, n := range samplingRanges {
		if err := pipeline.CheckNumber(root.Get(n.key), n.key, n.min, n.max, false); err != nil {
			return err
		}
	}
	stop := root.Get("stop")
	strs := stop.IsArray()
	if strs {
		stop.ForEach(func(_, s gjson.Result) bool {
			strs = s.Type == gjson.String
			return strs
		})
	}
	if stop.Exists() && stop.Type != gjson.Null && stop.Type != gjson.String && !strs {
		return pipeline.BadRequest("stop", "Invalid 'stop': expected a string or a list of strings.")
	}
	return pipeline.CheckBool(root.Get("parallel_tool_calls"), "parallel_tool_calls")
}

// clientMaxTokens is the client's max_completion_tokens or max_tokens, 0
// when it sets neither.
func clientMaxTokens(root gjson.Result) int64 {
	for _, k := range [...]string{"max_completion_tokens", "max_tokens"} {
		if v := root.Get(k); v.Type == gjson.Number && v.Int() > 0 {
			return v.Int()
		}
	}
	return 0
}

// stopSequences reads stop (a string or a list of strings) for
// stop_sequences: empty entries are dropped, and so are those of
// whitespace only, which Anthropic refuses and the answer's decoder
// applies instead (LocalStops).
func stopSequences(stop gjson.Result) []string {
	return stopsWhere(stop, func(s string) bool { return strings.TrimSpace(s) != "" })
}

// stopsWhere returns the strings of stop (a string or a list of strings)
// that keep reports true for.
func stopsWhere(stop gjson.Result, keep func(string) bool) []string {
	var out []string
	add := func(_, s gjson.Result) bool {
		if s.Type == gjson.String && keep(s.Str) {
			out = append(out, s.Str)
		}
		return true
	}
	if stop.IsArray() {
		stop.ForEach(add)
	} else {
		add(gjson.Result{}, stop)
	}
	return out
}

// minBudget is Anthropic's smallest thinking budget.
const minBudget = 1024

// maxBudget bounds a thinking budget: far above any model's output limit,
// and low enough that max_tokens plus it cannot overflow (a budget near
// 2^63 sent Anthropic a negative max_tokens).
const maxBudget = 1 << 31

// setSampling sets temperature and top_p, or thinking from the client's
// thinking object (passed through) or reasoning_effort. Anthropic refuses
// temperature and top_p changes while thinking, so they are not sent then;
// "disabled" thinking is sent with them. Anthropic's max_tokens counts
// thinking and must exceed the budget: a default max_tokens grows past the
// budget, but the client's (or a policy's cap written as the client's)
// bounds thinking and answer together, as OpenAI's does for reasoning, so
// the budget shrinks under it, and thinking is left out when less than
// minBudget fits (rather than refused: reasoning_effort is a hint OpenAI
// honours under any max_tokens). An enabled budget under minBudget, or
// none, is raised to minBudget, Anthropic's smallest, before that. So the
// pair sent always has minBudget <= budget_tokens < max_tokens. Anthropic also refuses thinking with a
// tool_choice that forces a call ("Thinking
// may not be enabled when tool_choice forces tool use"): the forced call
// is what the client asked of this answer, so thinking is left out then
// (after its settings are checked) and the request is sent as one without
// it, as other gateways do, rather than refused. The same goes for a
// request whose last assistant message called a tool without its thinking
// blocks (lastAssistantUnsigned). Without thinking, no thinking block is
// sent.
func setSampling(out *messagesRequest, root gjson.Result) error {
	var budget int64
	effort := false // the budget is reasoning_effort's, not the client's own
	if th := root.Get("thinking"); th.IsObject() {
		out.Thinking = json.RawMessage(th.Raw)
		budget = th.Get("budget_tokens").Int()
	} else if re := root.Get("reasoning_effort"); re.Type == gjson.String && re.Str != "none" {
		b, ok := thinkingBudgets[re.Str]
		if !ok {
			return pipeline.BadRequest("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high, xhigh, max")
		}
		budget, effort = b, true
		out.Thinking = json.RawMessage(`{"type":"enabled","budget_tokens":` + strconv.FormatInt(b, 10) + `}`)
	}
	if out.Thinking != nil && (budget < 0 || budget > maxBudget) {
		return pipeline.BadRequest("thinking.budget_tokens", "thinking.budget_tokens must be a number of tokens from 0 to %d", maxBudget)
	}
	if bt := gjson.GetBytes(out.Thinking, "budget_tokens"); gjson.GetBytes(out.Thinking, "type").Str == "enabled" &&
		(budget < minBudget || bt.Type != gjson.Number) {
		// Anthropic requires a budget while thinking is enabled, and refuses
		// one under minBudget: a smaller (or missing) one is raised to it.
		budget = max(budget, minBudget)
		th, err := sjson.SetBytes(out.Thinking, "budget_tokens", budget)
		if err != nil {
			return pipeline.BadRequest("thinking", "the thinking object cannot be sent to this model")
		}
		out.Thinking = th
	}
	thinking := out.Thinking != nil && gjson.GetBytes(out.Thinking, "type").Str != "disabled"
	if thinking && (out.ToolChoice.forcesCall() || lastAssistantUnsigned(out.Messages) || prefilled(out.Messages)) {
		out.Thinking, thinking = nil, false
	}
	switch client := clientMaxTokens(root) > 0; {
	case !thinking:
	case !client && out.MaxTokens <= budget:
		out.MaxTokens += budget // both at most maxBudget here: no overflow
	case client && (out.MaxTokens <= budget || (effort && budget > max(out.MaxTokens/2, minBudget))):
		// Under the client's max_tokens, thinking takes half, or
		// Anthropic's minimum when half is less: a budget of max_tokens-1
		// left the answer one token. An effort's budget is shrunk so
		// whenever it would take more; the client's own thinking object
		// only when it does not fit. Without room for the minimum and an
		// answer, no thinking.
		if out.MaxTokens <= minBudget {
			out.Thinking, thinking = nil, false
			break
		}
		th, err := sjson.SetBytes(out.Thinking, "budget_tokens", max(out.MaxTokens/2, minBudget))
		if err != nil {
			return pipeline.BadRequest("thinking", "the thinking object cannot be sent to this model")
		}
		out.Thinking = th
	}
	if thinking {
		return nil
	}
	dropThinking(out.Messages)
	if t := root.Get("temperature"); t.Type == gjson.Number {
		v := min(t.Float(), 1) // OpenAI's range is 0..2, Anthropic's 0..1
		out.Temperature = &v
	}
	// Current Claude models refuse temperature and top_p together
	// ("cannot both be specified"), and Anthropic asks for one or the other
	// on every model; OpenAI clients often send both. temperature is the one
	// kept: it is what nearly every client means to set.
	if p := root.Get("top_p"); p.Type == gjson.Number && out.Temperature == nil {
		v := p.Float()
		out.TopP = &v
	}
	return nil
}

// translateTools turns function tools into Anthropic tools; a marker on
// the tool or on its function becomes the tool's cache_control. A schema
// without a type gets "type":"object".
func translateTools(tools gjson.Result) ([]tool, error) {
	if !tools.IsArray() {
		if tools.Exists() && tools.Type != gjson.Null {
			return nil, pipeline.BadRequest("tools", "tools must be a list")
		}
		return nil, nil
	}
	var out []tool
	var err error
	i := 0
	tools.ForEach(func(_, t gjson.Result) bool {
		fn := t.Get("function")
		if t.Get("type").Str != "function" || !fn.IsObject() || fn.Get("name").Str == "" {
			err = pipeline.BadRequest("tools["+strconv.Itoa(i)+"]", "only function tools with a name can be sent to this model")
			return false
		}
		schema := json.RawMessage(`{"type":"object"}`)
		if p := fn.Get("parameters"); p.IsObject() && p.Get("type").Exists() {
			schema = json.RawMessage(p.Raw)
		} else if p.IsObject() {
			// Anthropic requires the type ({} is a valid schema to OpenAI).
			schema, _ = sjson.SetRawBytes([]byte(p.Raw), "type", []byte(`"object"`))
		}
		out = append(out, tool{Name: fn.Get("name").Str, Description: fn.Get("description").Str, InputSchema: schema,
			Strict: fn.Get("strict").Type == gjson.True, CacheControl: marker(t, fn)})
		i++
		return true
	})
	return out, err
}

// jsonObjectInstruction is the system block a json_object response_format
// adds: Anthropic has no JSON mode that takes any object (structured
// outputs need a schema), and prefilling "{" is refused while thinking and
// would need the decoders to put the "{" back, so the model is asked. The
// answer is not checked.
const jsonObjectInstruction = "Respond with a single valid JSON object and nothing else: no text before or after it, and no Markdown code fence."

// outputFormatOf maps a json_schema response_format to Anthropic's
// structured output; nil for any other (text; json_object, which asks
// for JSON in the system instead: jsonObjectInstruction).
func outputFormatOf(rf gjson.Result) (*outputConfig, error) {
	if rf.Get("type").Str != "json_schema" {
		return nil, nil
	}
	schema := rf.Get("json_schema.schema")
	if !schema.Exists() {
		return nil, nil // no shape given: asked for as json_object is (TranslateRequest)
	}
	if !schema.IsObject() {
		return nil, pipeline.BadRequest("response_format.json_schema.schema", "a json_schema response_format needs a schema object")
	}
	return &outputConfig{Format: outputFormat{Type: "json_schema", Schema: json.RawMessage(schema.Raw)}}, nil
}

// lastAssistantUnsigned reports whether the last assistant message calls
// a tool without starting with a thinking block. With thinking on,
// Anthropic requires that message to start with the signed thinking blocks
// it was answered with: the tool loop's own rounds carry them
// (pipeline.ThinkingMember), a client's history does not, and such a
// request (a client's follow-up with tool results) is sent without
// thinking.
func lastAssistantUnsigned(msgs []message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "assistant" {
			continue
		}
		c := msgs[i].Content
		return hasToolUse(c) && !c[0].isThinking()
	}
	return false
}

// trimPrefill takes the trailing whitespace off a last assistant message's
// text (a prefill the answer continues): Anthropic refuses a final
// assistant content that ends in whitespace ("final assistant content
// cannot end with trailing whitespace"), which OpenAI takes. A text left
// empty is dropped, and the text before it trimmed in turn; a message
// left empty goes too. A breakpoint on what is dropped moves to the block
// that now ends the messages, so the prefix stays cached.
func trimPrefill(msgs []message) []message {
	var cc json.RawMessage // a dropped block's breakpoint
	for n := len(msgs); n > 0 && msgs[n-1].Role == "assistant"; n = len(msgs) {
		last := &msgs[n-1]
		for k := len(last.Content) - 1; k >= 0 && last.Content[k].Type == "text"; k-- {
			b := &last.Content[k]
			if b.Text = strings.TrimRightFunc(b.Text, unicode.IsSpace); b.Text != "" {
				return keepBreakpoint(msgs, cc)
			}
			if cc == nil {
				cc = b.CacheControl
			}
			last.Content = last.Content[:k]
		}
		if len(last.Content) > 0 {
			return keepBreakpoint(msgs, cc) // it ends in a block other than text
		}
		msgs = msgs[:n-1]
	}
	return keepBreakpoint(msgs, cc)
}

// keepBreakpoint puts cc, a dropped block's breakpoint, on the last block
// of msgs when it has none.
func keepBreakpoint(msgs []message, cc json.RawMessage) []message {
	if cc == nil || len(msgs) == 0 {
		return msgs
	}
	last := &msgs[len(msgs)-1]
	if k := len(last.Content) - 1; k >= 0 && last.Content[k].CacheControl == nil {
		last.Content[k].CacheControl = cc
	}
	return msgs
}

// prefilled reports whether the last message is the assistant's (a
// prefill the answer continues), which Anthropic refuses while thinking
// unless it starts with a thinking block: such a request goes without.
func prefilled(msgs []message) bool {
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	return last.Role == "assistant" && (len(last.Content) == 0 || !last.Content[0].isThinking())
}

// hasToolUse reports whether blocks hold a tool_use block.
func hasToolUse(blocks []block) bool {
	for _, b := range blocks {
		if b.Type == "tool_use" {
			return true
		}
	}
	return false
}

// forcesCall reports whether the choice makes the model call a tool (any,
// or a named tool); nil forces nothing.
func (c *toolChoice) forcesCall() bool {
	return c != nil && (c.Type == "any" || c.Type == "tool")
}

// translateToolChoice maps tool_choice and parallel_tool_calls; nil when
// neither says anything.
func translateToolChoice(tc, parallel gjson.Result) (*toolChoice, error) {
	var out *toolChoice
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
	case tc.Type == gjson.String:
		switch tc.Str {
		case "auto":
			out = &toolChoice{Type: "auto"}
		case "none":
			out = &toolChoice{Type: "none"}
		case "required":
			out = &toolChoice{Type: "any"}
		default:
			return nil, pipeline.BadRequest("tool_choice", "tool_choice must be auto, none, required or a function")
		}
	case tc.IsObject() && tc.Get("function.name").Str != "":
		out = &toolChoice{Type: "tool", Name: tc.Get("function.name").Str}
	default:
		return nil, pipeline.BadRequest("tool_choice", "tool_choice must be auto, none, required or a function")
	}
	if parallel.Type == gjson.False {
		if out == nil {
			out = &toolChoice{Type: "auto"}
		}
		if out.Type != "none" {
			out.DisableParallelToolUse = true
		}
	}
	return out, nil
}

// choiceWithoutTools refuses a tool_choice sent without tools (or whose
// allowed_tools named none) that OpenAI refuses: one that is no choice at
// all, or one that needs a call. Dropped, the model would answer in text
// as if it had been asked to.
func choiceWithoutTools(tc gjson.Result) error {
	switch {
	case !tc.Exists() || tc.Type == gjson.Null, tc.Str == "auto", tc.Str == "none":
		return nil
	case tc.Type == gjson.String && tc.Str != "required":
		return pipeline.BadRequest("tool_choice", "tool_choice must be auto, none, required or a function")
	case tc.Get("type").Str == "allowed_tools" && tc.Get("allowed_tools.mode").Str != "required":
		return nil
	}
	return pipeline.BadRequest("tool_choice", "tool_choice is only allowed when tools are specified")
}

// allowedTools narrows tools to those an allowed_tools choice's list names
// (chat's {"type":"function","function":{"name":…}}, or a bare name) and
// returns the choice its mode makes: "required" or "auto"; when it names
// none of them, all tools with "none".
func allowedTools(tools []tool, allowed gjson.Result) ([]tool, gjson.Result) {
	names := map[string]bool{}
	allowed.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if n := t.Get("function.name").Str; n != "" {
			names[n] = true
		} else if n := t.Get("name").Str; n != "" {
			names[n] = true
		}
		return true
	})
	kept := tools[:0:0]
	for _, t := range tools {
		if names[t.Name] {
			kept = append(kept, t)
		}
	}
	if len(kept) == 0 {
		// None of them allowed: the tools stay (a history with tool_use
		// or tool_result blocks needs them), and none may be called.
		return tools, gjson.Parse(`"none"`)
	}
	if allowed.Get("mode").Str == "required" {
		return kept, gjson.Parse(`"required"`)
	}
	return kept, gjson.Parse(`"auto"`)
}

// historyTools declares the tools msgs' tool_use blocks call, each once,
// with an open schema; nil when there are none.
func historyTools(msgs []message) []tool {
	var out []tool
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == "tool_use" && !slices.ContainsFunc(out, func(t tool) bool { return t.Name == b.Name }) {
				out = append(out, tool{Name: b.Name, InputSchema: json.RawMessage(`{"type":"object"}`)})
			}
		}
	}
	return out
}

// marker returns the first cache_control object among objs, or nil.
func marker(objs ...gjson.Result) json.RawMessage {
	for _, o := range objs {
		if cc := o.Get("cache_control"); cc.IsObject() {
			return json.RawMessage(cc.Raw)
		}
	}
	return nil
}

// capBreakpoints keeps at most MaxBreakpoints cache_control markers, the
// last ones in prefix order (tools, system, messages): a later breakpoint
// caches a longer prefix.
func capBreakpoints(r *messagesRequest) {
	marks := markers(r)
	for _, m := range marks[:max(0, len(marks)-MaxBreakpoints)] {
		*m = nil
	}
	orderTTLs(marks[max(0, len(marks)-MaxBreakpoints):])
}

// orderTTLs makes every marker before the last one-hour marker (in prefix
// order) a one-hour one too: Anthropic refuses a request whose 1h marker
// comes after a 5m one, which the gateway's own markers (a prompt_cache
// breakpoint of the default 5m before a client's 1h one on its last
// message, or the provider's prompt_cache_ttl = "1h" after a client's
// plain marker) would otherwise make. A longer life for a prefix of what
// is kept an hour costs a dearer cache write, never a refused request.
func orderTTLs(marks []*json.RawMessage) {
	last := -1
	for i, m := range marks {
		if gjson.GetBytes(*m, "ttl").Str == "1h" {
			last = i
		}
	}
	for _, m := range marks[:max(0, last)] {
		if gjson.GetBytes(*m, "ttl").Str != "1h" {
			if out, err := sjson.SetBytes(*m, "ttl", "1h"); err == nil {
				*m = out
			}
		}
	}
}

// markers lists r's cache_control markers in prefix order: tools, system
// blocks, message blocks and the blocks inside tool results.
func markers(r *messagesRequest) []*json.RawMessage {
	var marks []*json.RawMessage
	for i := range r.Tools {
		if r.Tools[i].CacheControl != nil {
			marks = append(marks, &r.Tools[i].CacheControl)
		}
	}
	var collect func(bs []block)
	collect = func(bs []block) {
		for i := range bs {
			if bs[i].CacheControl != nil {
				marks = append(marks, &bs[i].CacheControl)
			}
			collect(bs[i].Content)
		}
	}
	collect(r.System)
	for i := range r.Messages {
		collect(r.Messages[i].Content)
	}
	return marks
}

package policies

import (
	"errors"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// A request that names an object the provider stores for the gateway's
// account (a file, vector stores, a container, a conversation, an audio
// answer) is refused for a tenant that may not use that object's
// endpoint, on chat and on a pass-through Responses call alike; a tenant
// opted into it passes, and members that only look like references (a
// schema's property, metadata, the audio modality) pass for everyone.
func TestStoredRefs(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{
		Keys: []config.Key{{Tenant: "plain", Key: "k-plain"}, {Tenant: "all", Key: "k-all"}},
		Policies: []config.Policy{
			{Tenant: "all", Passthrough: []string{"/v1/*"}},
		},
	}
	e, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := e.Authenticate("k-plain")
	all, _ := e.Authenticate("k-all")
	refs := []struct{ endpoint, body, param string }{
		{"", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"sum"},{"type":"file","file":{"file_id":"file-x"}}]}]}`, "messages[0].content[1].file.file_id"},
		{"", `{"model":"m","messages":[{"role":"assistant","audio":{"id":"audio_x"}},{"role":"user","content":"again"}]}`, "messages[0].audio.id"},
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-x"}]}]}`, "input[0].content[0].file_id"},
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-x"}]}]}`, "input[0].content[0].file_id"},
		{"/v1/responses", `{"model":"m","input":"q","tools":[{"type":"file_search","vector_store_ids":["vs_x"]}]}`, "tools[0].vector_store_ids"},
		{"/v1/responses", `{"model":"m","input":"q","tools":[{"type":"code_interpreter","container":"cntr_x"}]}`, "tools[0].container"},
		{"/v1/responses", `{"model":"m","input":"q","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-x"]}}]}`, "tools[0].container.file_ids"},
		{"/v1/responses", `{"model":"m","input":"q","conversation":"conv_x"}`, "conversation"},
		{"/v1/responses", `{"model":"m","input":"q","conversation":{"id":"conv_x"}}`, "conversation"},
		{"/v1/responses", `{"model":"m","prompt":{"id":"pmpt_1","variables":{"doc":{"type":"input_file","file_id":"file-x"}}}}`, "prompt.variables.doc.file_id"},
		{"/v1/images/edits", `{"model":"m","prompt":"p","images":[{"file_id":"file-x"}]}`, "images[0].file_id"},
		{"/v1/images/edits", `{"model":"m","prompt":"p","mask":{"file_id":"file-x"}}`, "mask.file_id"},
		// Keys spelt with escapes or in another case (Go's encoding/json
		// reads both), and the objects made of files.
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file\u005fid":"file-x"}]}]}`, "input[0].content[0].file_id"},
		{"/v1/responses", `{"model":"m","input":"q","conversati\u006fn":"conv_x"}`, "conversation"},
		{"", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"File_Id":"file-x"}}]}]}`, "messages[0].content[0].file.File_Id"},
		{"", `{"model":"m","messages":[{"role":"assistant","Audio":{"id":"audio_x"}},{"role":"user","content":"again"}]}`, "messages[0].Audio.id"},
		{"", `{"model":"m","messages":[{"role":"assistant","audio":{"ID":"audio_x"}},{"role":"user","content":"again"}]}`, "messages[0].audio.id"},
		{"/v1/responses", `{"model":"m","input":"q","Conversation":"conv_x"}`, "Conversation"},
		{"/v1/responses", `{"model":"m","input":"q","converſation":"conv_x"}`, "converſation"},
		{"/v1/responses", `{"model":"m","input":"q","tools":[{"type":"code_interpreter","CONTAINER":"cntr_x"}]}`, "tools[0].CONTAINER"},
		{"/v1/vector_stores", `{"name":"mine","file_ids":["file-x"]}`, "file_ids"},
		{"/v1/vector_stores/vs_1/files", `{"file_id":"file-x"}`, "file_id"},
		{"/v1/containers", `{"name":"c","file_ids":["file-x"]}`, "file_ids"},
		{"/v1/conversations", `{"items":[{"type":"message","role":"user","content":[{"type":"input_file","file_id":"file-x"}]}]}`, "items[0].content[0].file_id"},
		// A saved prompt's variables have names the client chose: none is
		// passed over, whatever it is called.
		{"/v1/responses", `{"model":"m","prompt":{"id":"pmpt_1","variables":{"format":{"type":"input_file","file_id":"file-x"}}}}`, "prompt.variables.format.file_id"},
		{"/v1/responses", `{"model":"m","prompt":{"id":"pmpt_1","variables":{"results":{"type":"input_file","file_id":"file-x"}}}}`, "prompt.variables.results.file_id"},
		{"/v1/responses", `{"model":"m","prompt":{"id":"pmpt_1","variables":{"audio":{"type":"input_file","file_id":"file-x"}}}}`, "prompt.variables.audio.file_id"},
		{"/v1/fine_tuning/jobs", `{"model":"m","training_file":"file-x"}`, "training_file"},
	}
	for _, tc := range refs {
		for _, tn := range []*pipeline.Tenant{plain, all} {
			r := &pipeline.Request{Endpoint: tc.endpoint, Model: "m", Body: []byte(tc.body)}
			err := e.Admit(tn, r)
			var pe *pipeline.Error
			switch {
			case tn == all && err != nil:
				t.Errorf("%s: a tenant allowed every path was refused: %v", tc.body, err)
			case tn == plain && (!errors.As(err, &pe) || pe.Status != 403 || pe.Code != pipeline.CodePathNotAllowed || pe.Param != tc.param):
				t.Errorf("%s: err %v, want 403 path_not_allowed on %s", tc.body, err, tc.param)
			}
		}
	}
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"file_id":{"type":"string"},"container":{"type":"string"}},"examples":[{"file_id":"file-x"}]}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":{"file_id":"file-x","conversation":"c"}}`,
		`{"model":"m","modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"file_id":{"type":"string"}},"examples":[{"file_id":"file-x"}],"default":{"container":"c"}}}}]}`,
		// A stateless Responses turn replays what file search found and
		// cited: metadata about files, which the model does not load.
		`{"model":"m","input":[{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":[{"file_id":"file-x","text":"t"}]},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[{"type":"file_citation","file_id":"file-x","index":0}]}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \u2014 no reference"}]}`,
		`{"model":"m","input":"q","tools":[{"type":"mcp","server_label":"s","server_url":"https://x.example","headers":{"container":"abc"}}]}`,
	} {
		if err := e.Admit(plain, &pipeline.Request{Model: "m", Body: []byte(body)}); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// The chat middleware's check is the same Admit.
	r := &pipeline.Request{Model: "m", Body: []byte(refs[0].body)}
	if err := PolicyOf(plain).Admit(r); err == nil {
		t.Error("Policy.Admit passed a chat file reference")
	}
}

// FuzzStoredRefs: any body is judged without a panic, and a body without
// any member that names a stored object always passes.
func FuzzStoredRefs(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"assistant","audio":{"id":"a"}},{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}]}`)
	f.Add(`{"input":[{"content":[{"file_id":"f"}]}],"tools":[{"container":{"file_ids":["f"]}},{"vector_store_ids":["v"]}],"conversation":"c"}`)
	f.Add(`{"messages":[[[[[[[[[[{"file_id":"x"}]]]]]]]]]]}`)
	f.Add(`[1,2]`)
	f.Add(`{"File_ID":"x","conversati\u006fn":"c"}`)
	p := &Policy{paths: &globs{}}
	all := &Policy{paths: &globs{all: true}}
	f.Fuzz(func(t *testing.T, body string) {
		r := &pipeline.Request{Endpoint: "/v1/responses", Body: []byte(body)}
		err := p.storedRefs(r)
		if err != nil && !mayRefer([]byte(body), false) {
			t.Fatalf("refused a body naming nothing: %v", err)
		}
		if all.storedRefs(r) != nil {
			t.Fatal("refused a tenant allowed every path")
		}
		// A file_id member of the top-level object (the one gjson reads,
		// decoded) is always found.
		if v := gjson.Get(body, "file_id"); gjson.Valid(body) && v.Type == gjson.String && err == nil {
			t.Fatalf("passed %s", body)
		}
	})
}

// A tool-using conversation that names no stored object is not walked:
// its tool_call_id and call_id members do not set the pre-filter off.
func TestStoredRefsPrefilter(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"ok"}],"previous_response_id":"resp_1","safety_identifier":"u"}`)
	for _, chat := range []bool{true, false} {
		if mayRefer(body, chat) {
			t.Errorf("chat %v: a body without references would be walked", chat)
		}
	}
	for _, b := range []string{`{"File_Ids":[]}`, `{"vector_store_ids":[]}`, `{"x":"\u0041"}`, `{"AUDIO":{}}`, `{"Training_File":"f"}`, `{"converſation":"c"}`, `{"vector_ſtore_ids":["v"]}`, "{\"\u212aey\":1}"} {
		if !mayRefer([]byte(b), false) {
			t.Errorf("%s would not be walked", b)
		}
	}
}

// BenchmarkMayRefer is the pre-filter of a large chat body that names no
// stored object (every member searched, none found): what every chat
// request without references pays.
func BenchmarkMayRefer(b *testing.B) {
	var body []byte
	body = append(body, `{"model":"m","messages":[`...)
	for i := range 400 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"role":"assistant","content":"a long answer with \"quotes\" and words about audits","name":"n"}`...)
	}
	body = append(body, `]}`...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if mayRefer(body, true) || mayRefer(body, false) {
			b.Fatal("a body without references would be walked")
		}
	}
}

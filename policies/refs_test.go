package policies

import (
	"errors"
	"testing"

	"github.com/rs/zerolog"

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
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}}}]}`,
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
	p := &Policy{paths: &globs{}}
	f.Fuzz(func(t *testing.T, body string) {
		err := p.storedRefs(&pipeline.Request{Body: []byte(body)})
		if err != nil && !mayRefer([]byte(body)) {
			t.Fatalf("refused a body naming nothing: %v", err)
		}
	})
}

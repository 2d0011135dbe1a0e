package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/toolloop"
	"github.com/llmgw/gateway/wiretest"
)

// configFile is a config path of the test's own: what a gateway without
// Redis keeps across reloads is kept per config file.
func configFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "gateway.toml")
}

// TestReloadKeepsStoredResponses: without Redis, a reload (SIGHUP) of the
// same config file, unchanged or with another memory bound, keeps the
// Responses API responses the gateway stored: their tenant reads and
// continues them; another tenant still gets the 404 of an unknown one.
// A reload used to start an empty store. A reload that switches to Redis
// uses Redis.
func TestReloadKeepsStoredResponses(t *testing.T) {
	t.Parallel()
	h := newHarnessAt(t, configFile(t), baseConfig+`
[[keys]]
name = "a-key"
key = "sk-a"
tenant = "a"
[[keys]]
name = "b-key"
key = "sk-b"
tenant = "b"
`, mockllm.Options{Respond: responsesModel})
	ctx := context.Background()
	asA, asB := option.WithAPIKey("sk-a"), option.WithAPIKey("sk-b")
	r, err := h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember me")},
	}, asA)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asA)
		if err != nil {
			t.Fatalf("%s: the owner's GET: %v", when, err)
		}
		if got.ID != r.ID || got.OutputText() != r.OutputText() {
			t.Fatalf("%s: the owner's GET: %s %q, want %s %q", when, got.ID, got.OutputText(), r.ID, r.OutputText())
		}
		next, err := h.client.Responses.New(ctx, responses.ResponseNewParams{
			Model: "gpt-x", PreviousResponseID: openai.String(r.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and now?")},
		}, asA)
		if err != nil || next.PreviousResponseID != r.ID {
			t.Fatalf("%s: the owner's previous_response_id: %v", when, err)
		}
		var apiErr *openai.Error
		if _, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asB); !asStatus(err, &apiErr, http.StatusNotFound) {
			t.Fatalf("%s: tenant b read tenant a's response: %v", when, err)
		}
		_, err = h.client.Responses.New(ctx, responses.ResponseNewParams{
			Model: "gpt-x", PreviousResponseID: openai.String(r.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and now?")},
		}, asB)
		if !asStatus(err, &apiErr, http.StatusNotFound) || apiErr.Param != "previous_response_id" {
			t.Fatalf("%s: tenant b continued tenant a's response: %v", when, err)
		}
	}
	check("before the reload")
	h.reload()
	check("after a reload of the same config")
	// Another bound resizes the store in place: what fits stays.
	h.toml += "\n[responses]\nmax_bytes = 1048576\n"
	h.reload()
	check("after a reload with another max_bytes")

	// A config that switches to Redis keeps its responses there: the ones
	// kept in memory are not its.
	rs := testredis.Start(t)
	h.toml = strings.Replace(h.toml, "[responses]\n", `[redis]
addr = "`+rs.Addr()+`"
prefix = "reload-test:"
[responses]
`, 1)
	h.reload()
	var apiErr *openai.Error
	if _, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asA); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("with Redis the response kept in memory is found: %v", err)
	}
	r, err = h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember me in redis")},
	}, asA)
	if err != nil {
		t.Fatal(err)
	}
	check("with Redis")
	if keys, err := rs.Client(t).Keys(ctx, "reload-test:*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("nothing stored in Redis (%q, %v)", keys, err)
	}
}

// TestReloadKeepsNativeResponseOwners: without Redis, the record of which
// tenant created a natively served response survives a reload of the same
// config, with store = "memory" (beside the stored responses) and with
// store = "none" (in a memory of its own): the tenant continues and reads
// its response, another tenant does not. A reload used to forget the
// records, and the gateway then refused the owner's follow-ups.
func TestReloadKeepsNativeResponseOwners(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "none"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			up := &responsesAPI{}
			srv := httptest.NewServer(up)
			t.Cleanup(srv.Close)
			h := newHarnessAt(t, configFile(t), strings.ReplaceAll(ownerConfig, "{{UP}}", srv.URL+"/v1")+
				"[responses]\nstore = \""+store+"\"\n", mockllm.Options{})
			id := createResponse(t, h.base, "sk-a", false)
			h.reload()
			status, _, body := send(t, "POST", h.base+"/responses", "sk-a", `{"model":"gpt-x","input":"and then?","previous_response_id":"`+id+`"}`)
			if status != 200 || gjson.GetBytes(body, "previous_response_id").Str != id {
				t.Fatalf("tenant a continues its own response after a reload: %d %s", status, body)
			}
			if status, _, body := send(t, "GET", h.base+"/responses/"+id, "sk-a", ""); status != 200 || gjson.GetBytes(body, "id").Str != id {
				t.Fatalf("tenant a reads its own response after a reload: %d %s", status, body)
			}
			before := up.seen()
			status, _, body = send(t, "POST", h.base+"/responses", "sk-b", `{"model":"gpt-x","input":"and then?","previous_response_id":"`+id+`"}`)
			if status != 404 || gjson.GetBytes(body, "error.code").Str != "response_not_found" {
				t.Fatalf("tenant b continues a's response after a reload: %d %s", status, body)
			}
			if status, _, body := send(t, "GET", h.base+"/responses/"+id, "sk-b", ""); status != 404 {
				t.Fatalf("tenant b reads a's response after a reload: %d %s", status, body)
			}
			if n := up.seen(); n != before {
				t.Fatalf("the provider got %d of the refused requests", n-before)
			}
		})
	}
}

// TestReloadKeepsPendingApproval: without Redis and without
// approval_secret, a call awaiting approval when the config is reloaded
// is still the caller's afterwards: its approval runs the tool once, with
// the hidden server call of its turn spliced back, and another tenant's
// decision is still refused. A reload used to make a new random key and
// an empty tool-loop state, so the id was refused as approval_invalid.
func TestReloadKeepsPendingApproval(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			se, url := newSideEffects(t)
			h := newHarnessAt(t, configFile(t), strings.ReplaceAll(approvalConfig, "{{HTTP}}", url), mockllm.Options{Respond: approvalResponder})
			schema := wiretest.LoadSchema(t)
			p, msg := pause(t, h, se, "clean up", stream, schema)
			h.reload()
			h.ask(t, answer(p, msg, `{"decision":"approve"}`), stream, schema, option.WithAPIKey("sk-other"))
			if seen := gatedResult(t, h, msg.ToolCalls[0].ID); len(se.runs()) != 0 || !strings.Contains(seen, `"approval_invalid"`) {
				t.Fatalf("another tenant's decision after a reload: runs %v, the model saw %s", se.runs(), seen)
			}
			final, finish, _, _ := h.ask(t, answer(p, msg, `{"decision":"approve"}`), stream, schema)
			if runs := se.runs(); len(runs) != 1 || runs[0] != `{"path":"/tmp/a"}` {
				t.Fatalf("tool runs %v after the owner's approval, want one", runs)
			}
			if seen := gatedResult(t, h, msg.ToolCalls[0].ID); !strings.Contains(seen, `"deleted":"/tmp/a"`) {
				t.Fatalf("the model saw %s", seen)
			}
			if got := upstreamShape(lastUpstream(h)); got != "user assistant(calculator,delete_file) tool tool" {
				t.Fatalf("upstream history %q", got)
			}
			if finish != "stop" || !strings.Contains(final.Content, `"result":42`) {
				t.Fatalf("final %q (%s)", final.Content, finish)
			}
		})
	}
}

// TestReloadKeepsApprovalKey: without approval_secret the gateway keys its
// approval ids with a random key of the process, which a reload keeps: a
// call whose state expired is told apart from one never handed out
// (approval_expired, not approval_invalid) after a reload as before it. A
// reload used to make a new key, under which the gateway no longer knew
// its own ids.
func TestReloadKeepsApprovalKey(t *testing.T) {
	t.Parallel()
	se, url := newSideEffects(t)
	h := newHarnessAt(t, configFile(t), strings.ReplaceAll(approvalConfig, "{{HTTP}}", url)+"[tool_loop]\nstate_ttl = \"1ms\"\n",
		mockllm.Options{Respond: approvalResponder})
	schema := wiretest.LoadSchema(t)
	p, msg := pause(t, h, se, "expire across a reload", false, schema)
	h.reload()
	time.Sleep(20 * time.Millisecond)
	h.ask(t, answer(p, msg, `{"decision":"approve"}`), false, schema)
	if len(se.runs()) != 0 {
		t.Fatal("an expired approval ran the tool")
	}
	if seen := gatedResult(t, h, msg.ToolCalls[0].ID); !strings.Contains(seen, `"approval_expired"`) {
		t.Fatalf("the model saw %s, want approval_expired", seen)
	}
}

// A reload the build refuses leaves the running runtime's kept stores as
// they were: the new bounds of the kept tool-loop state apply only once a
// build succeeds (toolloop.New can refuse a config that parses).
func TestRefusedReloadKeepsStateBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.toml")
	base := strings.ReplaceAll(baseConfig, "{{MOCK}}", "http://127.0.0.1:1/v1") + `
[[tools]]
name = "calculator"
kind = "builtin"
`
	parse := func(s string) *config.Config {
		cfg, err := config.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Path = path
		return cfg
	}
	rt, err := Build(parse(base), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	st := keep(path, "tool-loop-state", func() *toolloop.MemoryState { t.Fatal("not kept"); return nil })
	for i := range 10 {
		_ = st.Save(context.Background(), fmt.Sprint("k", i), &toolloop.HiddenTurn{})
	}
	bad := base + `
[[tools]]
name = "broken"
kind = "builtin"
builtin = "calculator"
parameters = '{"$ref":"#/nowhere"}'
[tool_loop]
state_max_entries = 1
`
	if _, err := Build(parse(bad), zerolog.Nop()); err == nil {
		t.Fatal("the bad config built")
	}
	if n, _ := st.Len(); n != 10 {
		t.Fatalf("the running runtime's tool-loop state holds %d of its 10 turns after a refused reload", n)
	}
}

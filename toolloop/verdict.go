package toolloop

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
)

var metricApproval = observe.Factory.NewCounterVec(prometheus.CounterOpts{
	Name: "gateway_toolloop_approval_total",
	Help: "Calls awaiting approval: pending (handed to the client), approve, edit, reject, answer (the person's own result), invalid (a malformed decision), expired, refused (an id not minted for the caller), claimed (a decision another request applied or is applying: nothing runs again), save_error, load_error.",
}, []string{"op"})

// verdictKind is what a person answered to a call awaiting approval.
type verdictKind uint8

const (
	decAnswer  verdictKind = iota // any other content: the person's own result
	decApprove                    // {"decision":"approve"}
	decEdit                       // {"decision":"edit","arguments":{...}}
	decReject                     // {"decision":"reject","message":"..."}
	decInvalid                    // an object with a "decision" key that is none of the above
)

func (k verdictKind) String() string {
	return [...]string{"answer", "approve", "edit", "reject", "invalid"}[k]
}

// verdict is a parsed answer. args (edit) is a compacted JSON object the
// decision owns; message is the reject reason, or for decInvalid what is
// wrong (safe to show the model, kind errKind).
type verdict struct {
	kind    verdictKind
	args    []byte
	message string
	errKind string
}

// maxReasonBytes bounds the reject message passed on to the model.
const maxReasonBytes = 2000

// parseVerdict reads the content of a tool message answering a call
// awaiting approval. A JSON object with a "decision" key is a decision, and
// one that is not well formed is decInvalid (never run, never mistaken for
// the person's own answer); anything else is decAnswer. Never panics.
func parseVerdict(text string) verdict {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "{") || !jsonvalid.String(t) {
		return verdict{kind: decAnswer}
	}
	res := gjson.GetMany(t, "decision", "arguments", "message")
	d, args, msg := res[0], res[1], res[2]
	if !d.Exists() {
		return verdict{kind: decAnswer}
	}
	switch {
	case d.Type != gjson.String:
	case d.Str == "approve":
		return verdict{kind: decApprove}
	case d.Str == "reject":
		m := msg.String()
		if len(m) > maxReasonBytes {
			m = strings.ToValidUTF8(m[:maxReasonBytes], "")
		}
		return verdict{kind: decReject, message: m}
	case d.Str == "edit":
		raw := args.Raw
		if args.Type == gjson.String { // the arguments as OpenAI writes them: a JSON string
			raw = args.Str
		}
		if r := gjson.Parse(raw); !jsonvalid.String(raw) || !r.IsObject() {
			return verdict{kind: decInvalid, errKind: "invalid_arguments",
				message: `the edited arguments are not a JSON object ("arguments":{...}); the tool was not run`}
		}
		return verdict{kind: decEdit, args: []byte(raw)}
	}
	return verdict{kind: decInvalid, errKind: "invalid_decision",
		message: fmt.Sprintf("the decision %s is not one of approve, edit, reject; the tool was not run", truncateRaw(d.Raw, 64))}
}

// truncateRaw shortens raw JSON for a message.
func truncateRaw(raw string, n int) string {
	if len(raw) <= n {
		return raw
	}
	return strings.ToValidUTF8(raw[:n], "") + "…"
}

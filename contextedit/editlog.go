package contextedit

import (
	"hash/maphash"
	"strconv"
	"sync"

	"github.com/llmgw/gateway/pipeline"
)

// EditLog records the edits the middleware made for one client request, so
// that every later round of the tool loop gets the same edits on the same
// messages: the tool loop keeps its own unedited transcript, and the
// middleware re-applies the log to it before deciding anything new. The
// cached prompt prefix then stays byte-identical from round to round, and a
// cleared result is never restored.
//
// Clears are keyed by tool_call_id and a hash of the tool message's JSON (an
// upstream that numbers its calls per response gives one id to results of
// several turns, and only the one cleared stays cleared) and keep the
// placeholder they were made with; dropped turns are keyed by a hash of the
// dropped messages' JSON. An EditLog is safe for concurrent use.
type EditLog struct {
	mu        sync.Mutex
	clears    []clearEntry
	byMsg     map[clearKey]int // the cleared tool message → index in clears
	drops     []dropEntry
	cleared   int // tool results cleared
	saved     int // tokens saved, as counted when decided
	dropped   int // messages dropped
	summaries int // drops replaced by a summary
}

// dropEntry is one drop: the hashes of the dropped messages, oldest first,
// and the summary message (raw JSON) that replaced them, if any.
type dropEntry struct {
	hashes  []uint64
	summary string
}

// clearKey names a cleared tool message: its tool_call_id and the hash of
// its JSON as received.
type clearKey struct {
	id   string
	hash uint64
}

type clearEntry struct {
	id          string
	placeholder string
	inputs      bool // the call's arguments were blanked too
}

// dropSeed hashes dropped messages; logs live no longer than the process.
var dropSeed = maphash.MakeSeed()

func hashMessage(raw string) uint64 { return maphash.String(dropSeed, raw) }

var _ pipeline.EditLog = (*EditLog)(nil)

// NewEditLog returns an empty log for one client request: the tool loop's
// Options.NewEditLog, which puts it on every round's Request.EditLog.
func NewEditLog() pipeline.EditLog { return &EditLog{} }

// editLogOf returns the request's EditLog, or nil when it has none (or one
// of another package).
func editLogOf(r *pipeline.Request) *EditLog {
	l, _ := r.EditLog.(*EditLog)
	return l
}

// Cleared returns the tool_call_ids of the cleared tool results, in the order
// they were cleared. The slice is the caller's.
func (l *EditLog) Cleared() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, len(l.clears))
	for i, e := range l.clears {
		ids[i] = e.id
	}
	return ids
}

// Stats returns the tool results cleared, the tokens that saved (as counted
// when decided) and the messages dropped so far.
func (l *EditLog) Stats() (cleared, tokensSaved, droppedMessages int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cleared, l.saved, l.dropped
}

// Apply returns body with the logged edits applied and nothing new decided:
// the tool loop may use it to keep its transcript edited. body is not
// modified; when no edit changes a byte, body itself is returned. It fails
// with ErrInvalidBody when body is not a chat request.
func (l *EditLog) Apply(body []byte) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, err := parse(body, nil)
	if err != nil {
		return nil, err
	}
	l.reapply(t)
	if !t.changed {
		return body, nil
	}
	return t.build(body)
}

// empty reports whether nothing was logged; a nil log is empty.
func (l *EditLog) empty() bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clears) == 0 && len(l.drops) == 0
}

// reapply applies the logged edits to t: clears first (by clearKey), then
// drops, each only where the transcript still holds the dropped messages at
// its start. The caller holds l.mu.
func (l *EditLog) reapply(t *transcript) {
	if len(l.clears) > 0 {
		for i := range t.msgs {
			m := &t.msgs[i]
			if m.role != "tool" || m.callID == "" {
				continue
			}
			if k, ok := l.byMsg[clearKey{m.callID, hashMessage(m.raw)}]; ok {
				e := l.clears[k]
				t.clear(i, e.placeholder, e.inputs)
			}
		}
	}
	for _, d := range l.drops {
		t.redrop(d.hashes, d.summary)
	}
}

// record adds new clears (tool message indexes in t) and a drop to the log.
// The caller holds l.mu.
func (l *EditLog) record(t *transcript, cleared []int, placeholder string, inputs bool, saved int, drop []uint64, summary string) {
	if l.byMsg == nil {
		l.byMsg = map[clearKey]int{}
	}
	for _, i := range cleared {
		id := t.msgs[i].callID
		k := clearKey{id, hashMessage(t.msgs[i].raw)}
		if _, ok := l.byMsg[k]; ok {
			continue
		}
		l.byMsg[k] = len(l.clears)
		l.clears = append(l.clears, clearEntry{id: id, placeholder: placeholder, inputs: inputs})
		l.cleared++
	}
	l.saved += saved
	if len(drop) > 0 {
		l.drops = append(l.drops, dropEntry{hashes: drop, summary: summary})
		l.dropped += len(drop)
		if summary != "" {
			l.summaries++
		}
	}
}

// header renders the x-gateway-context-edits value. The caller holds l.mu.
func (l *EditLog) header() string {
	s := "cleared=" + strconv.Itoa(l.cleared) + ";tokens_saved=" + strconv.Itoa(l.saved)
	if l.dropped > 0 {
		s += ";dropped=" + strconv.Itoa(l.dropped)
	}
	if l.summaries > 0 {
		s += ";summarized=" + strconv.Itoa(l.summaries)
	}
	return s
}

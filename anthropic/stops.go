package anthropic

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// Anthropic refuses a stop sequence of whitespace only ("\n", "\n\n"),
// which OpenAI clients use to get one line or one paragraph. The
// translation leaves such a sequence out of stop_sequences, and the
// answer's decoder (DecodeMessageStopping, StreamDecoder.StopAt) ends the
// content where the first of them begins, as the model would have: the
// text from there on, and every block after it, is not shown, and the
// finish is "stop". The model writes on upstream, so its usage counts
// what it wrote.

// LocalStops returns the stop sequences of the chat body that the gateway
// applies itself: the non-empty ones of whitespace only. nil when there
// are none (the usual case, found without parsing more than stop).
func LocalStops(body []byte) []string {
	return stopsWhere(gjson.GetBytes(body, "stop"), func(s string) bool { return s != "" && strings.TrimSpace(s) == "" })
}

// stopper applies local stop sequences to the events of one answer. Not
// safe for concurrent use.
type stopper struct {
	stops   []string
	held    []byte // content not shown yet: it may be the start of a stop sequence
	stopped bool
	called  bool // a call was shown before the stop
}

func newStopper(stops []string) *stopper {
	if len(stops) == 0 {
		return nil
	}
	return &stopper{stops: stops}
}

// filter decides what of e is shown: the content up to the first match
// (holding back what may begin one until the next fragment shows it does
// not), nothing of the answer after it but its finish and its usage. It
// returns the held content to show before e (nil: none) and whether e is
// shown, and may replace e.Text and e.Finish: the finish after a match is
// "stop", or "tool_calls" when a call was shown before it. The chat
// content is the text blocks joined, whatever comes between them, so the
// held content stays held across reasoning and calls. e does not escape:
// passed to a callback, every event of every Anthropic answer would go to
// the heap.
func (s *stopper) filter(e *wire.Event) (flush []byte, show bool) {
	switch {
	case e.Kind == wire.Role:
		return nil, true
	case e.Kind == wire.Finish:
		if s.stopped {
			e.Finish = "stop"
			if s.called {
				e.Finish = "tool_calls"
			}
		}
		return s.take(), true
	case e.Kind == wire.Usage || e.Kind == wire.End:
		return s.take(), true
	case s.stopped:
		return nil, false
	case e.Kind == wire.Text && e.Key == "content":
		e.Text = s.text(e.Text)
		return nil, len(e.Text) > 0
	default:
		s.called = s.called || e.Kind == wire.CallHeader
		return nil, true
	}
}

// text takes the next content fragment and returns what may be shown.
func (s *stopper) text(t []byte) []byte {
	buf := append(s.held, t...)
	at := -1
	for _, st := range s.stops {
		if i := bytes.Index(buf, []byte(st)); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at >= 0 {
		s.stopped, s.held = true, nil
		return buf[:at]
	}
	keep := 0 // the longest end of buf that begins a stop sequence
	for _, st := range s.stops {
		for k := min(len(st)-1, len(buf)); k > keep; k-- {
			if bytes.HasSuffix(buf, []byte(st[:k])) {
				keep = k
				break
			}
		}
	}
	s.held = append([]byte(nil), buf[len(buf)-keep:]...)
	return buf[:len(buf)-keep]
}

// take returns the held content, which the answer's end shows: what came
// after it was no match.
func (s *stopper) take() []byte {
	if len(s.held) == 0 || s.stopped {
		return nil
	}
	h := s.held
	s.held = nil
	return h
}

package pipeline

import "sync"

// Meta collects response headers set by the layers of one client request
// (x-gateway-model, x-gateway-attempts, x-gateway-cache, ...). Safe for
// concurrent use: tool calls of one turn run in parallel.
type Meta struct {
	mu     sync.Mutex
	header []Header
	inline [4]Header // the usual few headers need no allocation
	group  []Header  // a layer's own block of headers (SetGroup), after header
	// answered are the models that answered the request's later model
	// calls (NoteAnswered); never response headers.
	answered []string
	// reasks counts the calls a prompted model's middleware made again
	// within one model call (NoteReask); never a response header.
	reasks int
}

// Header is one response header.
type Header struct{ Key, Value string }

// Set replaces the header named key.
func (m *Meta) Set(key, value string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(key, value)
}

// SetAll sets each of hs as Set does, under one lock: for a layer that sets
// several at once (the six x-ratelimit-* headers). hs is not retained.
func (m *Meta) SetAll(hs ...Header) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setAll(hs)
}

// setAll is SetAll with m.mu held.
func (m *Meta) setAll(hs []Header) {
	if m.header == nil {
		m.header = m.inline[:0]
	}
	if need := len(m.header) + len(hs); need > cap(m.header) {
		// Room for hs and a few more, at once.
		grown := make([]Header, len(m.header), need+4)
		copy(grown, m.header)
		m.header = grown
	}
	for _, h := range hs {
		m.set(h.Key, h.Value)
	}
}

// SetGroup adds hs, a block of headers a layer sets together (the six
// x-ratelimit-* headers), without copying them: hs is retained, and the
// caller must not change it afterwards. It lives as long as the request,
// in the layer's own per-request state, so the block costs Meta nothing.
// A second group is copied in as SetAll does.
func (m *Meta) SetGroup(hs []Header) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.group != nil {
		m.setAll(hs)
		return
	}
	for _, h := range hs {
		m.drop(h.Key)
	}
	m.group = hs
}

// drop removes the header named key from m.header; m.mu is held.
func (m *Meta) drop(key string) {
	for i := range m.header {
		if m.header[i].Key == key {
			m.header = append(m.header[:i], m.header[i+1:]...)
			return
		}
	}
}

// set replaces the header named key; m.mu is held.
func (m *Meta) set(key, value string) {
	for i := range m.group {
		if m.group[i].Key == key {
			m.group[i].Value = value
			return
		}
	}
	for i := range m.header {
		if m.header[i].Key == key {
			m.header[i].Value = value
			return
		}
	}
	if m.header == nil {
		m.header = m.inline[:0]
	}
	if len(m.header) == cap(m.header) {
		// Past the inline few, room for the rest at once: rate limits
		// alone set six.
		grown := make([]Header, len(m.header), 3*cap(m.header))
		copy(grown, m.header)
		m.header = grown
	}
	m.header = append(m.header, Header{key, value})
}

// Get returns the value of key, or "".
func (m *Meta) Get(key string) string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, hs := range [2][]Header{m.header, m.group} {
		for _, h := range hs {
			if h.Key == key {
				return h.Value
			}
		}
	}
	return ""
}

// Each calls f with every collected header, in order, under m's lock: f
// must not use m. It copies nothing.
func (m *Meta) Each(f func(key, value string)) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.header {
		f(h.Key, h.Value)
	}
	for _, h := range m.group {
		f(h.Key, h.Value)
	}
}

// Headers returns a copy of the collected headers.
func (m *Meta) Headers() []Header {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(append([]Header(nil), m.header...), m.group...)
}

// NoteReask counts one more call that a prompted model's tool-calling
// middleware made to ask the model again, within the model call m
// describes.
func (m *Meta) NoteReask() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.reasks++
	m.mu.Unlock()
}

// Reasks returns how many calls NoteReask counted.
func (m *Meta) Reasks() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reasks
}

// NoteAnswered records model as having answered a model call made for this
// request whose headers went into a Meta of its own: a tool loop's later
// round, which the client's x-gateway-model cannot describe (a stream's
// headers are gone by then). The response cache reads them with
// Answered, so that an answer a fallback model wrote part of is never
// stored. Not a response header.
func (m *Meta) NoteAnswered(model string) {
	if m == nil || model == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.answered {
		if a == model {
			return
		}
	}
	m.answered = append(m.answered, model)
}

// Answered returns a copy of the models NoteAnswered recorded.
func (m *Meta) Answered() []string {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.answered...)
}

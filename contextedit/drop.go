package contextedit

// Dropping turns is the last resort when clearing tool results is not enough.
// A cut at message i drops every non-system message before i. A cut is valid
// when message i is a user message (a turn starts there), at most the latest
// user message (that turn is always kept), and no tool call and its result
// lie on both sides of it, so the pairing the upstreams check survives.
// System and developer messages are never dropped.

// cutPoints returns the valid cuts, ascending, that drop at least one message.
func (t *transcript) cutPoints() []int {
	n := len(t.msgs)
	diff := make([]int, n+1)
	lastUser, firstKept := -1, -1
	for j := range t.msgs {
		m := &t.msgs[j]
		if m.dropped {
			continue
		}
		if firstKept < 0 && !isSystem(m.role) {
			firstKept = j
		}
		if m.role == "user" {
			lastUser = j
		}
		if m.role == "tool" && m.owner >= 0 && !t.msgs[m.owner].dropped {
			// A cut at i in (owner, j] would separate the call from its result.
			diff[m.owner+1]++
			diff[j+1]--
		}
	}
	var cuts []int
	cross := 0
	for i := 0; i <= lastUser; i++ {
		cross += diff[i]
		if i > firstKept && cross == 0 && t.msgs[i].role == "user" && !t.msgs[i].dropped {
			cuts = append(cuts, i)
		}
	}
	return cuts
}

// planDrop picks the smallest valid cut that brings count to at most target,
// or the largest valid cut when none does. It returns the cut (-1 = none) and
// the count after it. It needs a Counter.
func (t *transcript) planDrop(count, target int) (cut, after int) {
	cut, after = -1, count
	next := 0
	for _, c := range t.cutPoints() {
		for ; next < c; next++ {
			if m := &t.msgs[next]; !m.dropped && !isSystem(m.role) {
				after -= t.cost(next)
			}
		}
		cut = c
		if after <= target {
			break
		}
	}
	return cut, after
}

// drop drops the non-system messages before cut and returns their hashes,
// oldest first, for the EditLog.
func (t *transcript) drop(cut int) []uint64 {
	var hashes []uint64
	for i := 0; i < cut; i++ {
		m := &t.msgs[i]
		if m.dropped || isSystem(m.role) {
			continue
		}
		m.dropped = true
		hashes = append(hashes, hashMessage(m.raw))
		t.changed = true
	}
	return hashes
}

// insert writes raw (a message) before msgs[i] when the transcript is built.
func (t *transcript) insert(i int, raw string) {
	if t.inserts == nil {
		t.inserts = map[int]string{}
	}
	t.inserts[i] = raw
	t.changed = true
}

// redrop re-applies a logged drop: when the first kept non-system messages
// are exactly the logged ones and cutting after them is still valid, they are
// dropped, and the drop's summary (if any) takes their place; otherwise (the
// transcript was already edited, or differs) nothing.
func (t *transcript) redrop(group []uint64, summary string) {
	k := 0
	cut := -1
	for i := range t.msgs {
		m := &t.msgs[i]
		if m.dropped || isSystem(m.role) {
			continue
		}
		if k == len(group) {
			cut = i
			break
		}
		if hashMessage(m.raw) != group[k] {
			return
		}
		k++
	}
	if cut < 0 {
		return
	}
	for _, c := range t.cutPoints() {
		if c == cut {
			t.drop(cut)
			if summary != "" {
				t.insert(cut, summary)
			}
			return
		}
	}
}

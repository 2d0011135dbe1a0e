package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// KeyError is a validation problem with the key it concerns, named as the
// file writes it ("models[2].provider", with indexes counted in the file),
// and the line where that key, or else the table that holds it, is
// defined. Parse joins several with errors.Join; find one with errors.As.
type KeyError struct {
	Key  string
	Line int // 1-based; 0 when the key is not in the file (a default)
	Msg  string
}

func (e *KeyError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Key, e.Msg)
	}
	return e.Key + ": " + e.Msg
}

// keyLines maps every key path b defines to its line: tables and array
// table elements ("models[2]" is the line of the third [[models]]), keys
// ("models[2].provider"), elements of arrays ("models[0].fallbacks[1]") and
// keys of inline tables. b must already have decoded without error; a
// parse error just ends the walk.
func keyLines(b []byte) map[string]int {
	lines := map[string]int{}
	starts := lineStarts(b)
	lineOf := func(r unstable.Range) int {
		// The number of line starts at or before the offset.
		lo, hi := 0, len(starts)
		for lo < hi {
			mid := (lo + hi) / 2
			if starts[mid] <= int(r.Offset) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return lo
	}
	set := func(path string, line int) {
		if _, ok := lines[path]; !ok {
			lines[path] = line
		}
	}
	var p unstable.Parser
	p.Reset(b)
	arrays := map[string]int{} // array table path without indexes → index of its current element
	table := ""                // the current table's path, with indexes
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			it := e.Key()
			var parts []string
			line := 0
			for it.Next() {
				if line == 0 {
					line = lineOf(it.Node().Raw)
				}
				parts = append(parts, string(it.Node().Data))
			}
			plain, path := "", ""
			for i, k := range parts {
				plain, path = join(plain, k), join(path, k)
				last := i == len(parts)-1
				if last && e.Kind == unstable.ArrayTable {
					n := 0
					if cur, ok := arrays[plain]; ok {
						n = cur + 1
					}
					arrays[plain] = n
					for k := range arrays { // a new element starts its nested arrays afresh
						if strings.HasPrefix(k, plain+".") {
							delete(arrays, k)
						}
					}
					set(path, line)
					path += "[" + strconv.Itoa(n) + "]"
				} else if n, ok := arrays[plain]; ok {
					path += "[" + strconv.Itoa(n) + "]"
				}
				set(path, line)
			}
			table = path
		case unstable.KeyValue:
			keyValueLines(e, table, lineOf, set)
		}
	}
	return lines
}

// keyValueLines records a key-value's line under prefix, and those of the
// elements and inline-table keys of its value.
func keyValueLines(e *unstable.Node, prefix string, lineOf func(unstable.Range) int, set func(string, int)) {
	path := prefix
	it := e.Key()
	for it.Next() {
		path = join(path, string(it.Node().Data))
		set(path, lineOf(e.Raw))
	}
	valueLines(e.Value(), path, lineOf(e.Raw), lineOf, set)
}

func valueLines(v *unstable.Node, path string, line int, lineOf func(unstable.Range) int, set func(string, int)) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); {
			n := it.Node()
			if n.Kind == unstable.Comment {
				continue
			}
			el := path + "[" + strconv.Itoa(i) + "]"
			l := lineOf(n.Raw)
			if n.Kind == unstable.Array {
				l = line // an array's own range is not recorded
			}
			set(el, l)
			valueLines(n, el, l, lineOf, set)
			i++
		}
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			if n := it.Node(); n.Kind == unstable.KeyValue {
				keyValueLines(n, path, lineOf, set)
			}
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// lineStarts returns the offset at which each line of b starts.
func lineStarts(b []byte) []int {
	starts := []int{0}
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return starts
		}
		i += j + 1
		starts = append(starts, i)
	}
}

// lineOfKey returns the line of key, or else of the nearest enclosing key or
// table the file defines; 0 when there is none.
func lineOfKey(lines map[string]int, key string) int {
	for key != "" {
		if l, ok := lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
	return 0
}

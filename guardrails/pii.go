package guardrails

import (
	"bytes"
	"regexp"
	"strings"
)

// detector finds one kind of value in text. pre is a cheap byte-level test
// that must hold for any match (a hint, not a proof), so prose without the
// value's shape costs a single pass; valid rejects matches the regular
// expression cannot tell from the real thing (checksums).
type detector struct {
	re    *regexp.Regexp
	pre   func([]byte) bool
	valid func([]byte) bool
	// regions, when set, returns the only places the value can be (pairs
	// of offsets): the expression runs on those alone, not the whole text.
	regions func(b []byte, dst []int) []int
}

var piiDetectors = map[string]detector{
	"email": {
		re:      regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`),
		pre:     func(b []byte) bool { return bytes.IndexByte(b, '@') >= 0 },
		regions: emailRegions,
	},
	"phone": {
		re:      regexp.MustCompile(`(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){2,4}`),
		valid:   func(m []byte) bool { n := countDigits(m); return n >= 9 && n <= 15 },
		regions: func(b []byte, dst []int) []int { return digitRegions(b, " .-()+", 9, dst) },
	},
	"credit_card": {
		re:      regexp.MustCompile(`\b\d(?:[ -]?\d){12,18}\b`),
		valid:   luhn,
		regions: func(b []byte, dst []int) []int { return digitRegions(b, " -", 13, dst) },
	},
	"iban": {
		re:      regexp.MustCompile(`\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b`),
		valid:   ibanChecksum,
		regions: ibanRegions,
	},
	"api_key": {
		re: regexp.MustCompile(`(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|sk_live_[0-9A-Za-z]{24,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})`),
		pre: func(b []byte) bool {
			for _, p := range [...]string{"sk-", "sk_live_", "AKIA", "gh", "xox", "AIza"} {
				if bytes.Contains(b, []byte(p)) {
					return true
				}
			}
			return false
		},
	},
}

func countDigits(b []byte) int {
	n := 0
	for _, c := range b {
		if c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// luhn reports whether the digits of b pass the Luhn check.
func luhn(b []byte) bool {
	sum, double, n := 0, false, 0
	for i := len(b) - 1; i >= 0; i-- {
		c := b[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
		n++
	}
	return n >= 13 && n <= 19 && sum%10 == 0
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ibanChecksum reports whether b (spaces allowed) passes the ISO 13616
// mod-97 check.
func ibanChecksum(b []byte) bool {
	var s []byte
	for _, c := range b {
		if c != ' ' {
			s = append(s, c)
		}
	}
	if len(s) < 15 || len(s) > 34 {
		return false
	}
	s = append(s[4:], s[:4]...)
	rem := 0
	for _, c := range s {
		switch {
		case isDigit(c):
			rem = (rem*10 + int(c-'0')) % 97
		case isUpper(c):
			rem = (rem*100 + int(c-'A'+10)) % 97
		default:
			return false
		}
	}
	return rem == 1
}

// isWordByte reports the bytes of an e-mail address's local part and domain.
func isMailByte(c byte) bool {
	return isDigit(c) || isUpper(c) || c >= 'a' && c <= 'z' || strings.IndexByte("._%+-", c) >= 0
}

// emailRegions returns the run of address bytes around each '@'.
func emailRegions(b []byte, dst []int) []int {
	for i := 0; i < len(b); i++ {
		if b[i] != '@' {
			continue
		}
		s, e := i, i+1
		for s > 0 && isMailByte(b[s-1]) {
			s--
		}
		for e < len(b) && isMailByte(b[e]) {
			e++
		}
		dst = append(dst, s, e)
		i = e - 1
	}
	return dst
}

// digitRegions returns the runs of digits and sep bytes holding at least
// min digits, widened by a byte on each side for \b.
func digitRegions(b []byte, sep string, least int, dst []int) []int {
	for i := 0; i < len(b); {
		if !isDigit(b[i]) {
			i++
			continue
		}
		j, n := i, 0
		for j < len(b) && (isDigit(b[j]) || strings.IndexByte(sep, b[j]) >= 0) {
			if isDigit(b[j]) {
				n++
			}
			j++
		}
		if n >= least {
			s := max(i-2, 0) // "+" or "(" before the first digit
			dst = append(dst, s, min(j+1, len(b)))
		}
		i = j
	}
	return dst
}

// ibanRegions returns, from each two letters and two digits, the run of
// upper-case letters, digits and spaces that follows.
func ibanRegions(b []byte, dst []int) []int {
	for i := 0; i+3 < len(b); i++ {
		if !(isUpper(b[i]) && isUpper(b[i+1]) && isDigit(b[i+2]) && isDigit(b[i+3])) {
			continue
		}
		j := i + 4
		for j < len(b) && (isUpper(b[j]) || isDigit(b[j]) || b[j] == ' ') {
			j++
		}
		dst = append(dst, max(i-1, 0), min(j+1, len(b)))
		i = j - 1
	}
	return dst
}

package wire

import "github.com/tidwall/gjson"

// Integer reports whether v is a JSON number whose literal denotes an
// integer exactly: "50", "50.0" (as Python writes a whole float), "1e6" or
// "1.5e1" are; "50.5", and a literal that only rounds to an integer in a
// float64 ("50.000000000000000000001", "0.99999999999999999999"), are not.
// An upstream may read such a literal otherwise than the gateway's float64
// does, so a check of an integer field reads the literal, not the float.
func Integer(v gjson.Result) bool {
	if v.Type != gjson.Number {
		return false
	}
	r := v.Raw
	if len(r) > 0 && r[0] == '-' {
		r = r[1:]
	}
	intEnd := digits(r, 0)
	if intEnd == 0 {
		return false
	}
	fracStart, fracEnd := intEnd, intEnd
	if fracEnd < len(r) && r[fracEnd] == '.' {
		fracStart = fracEnd + 1
		if fracEnd = digits(r, fracStart); fracEnd == fracStart {
			return false // "5.": no digit after the point
		}
	}
	exp, end := 0, fracEnd
	if end < len(r) && (r[end] == 'e' || r[end] == 'E') {
		end++
		neg := false
		if end < len(r) && (r[end] == '+' || r[end] == '-') {
			neg = r[end] == '-'
			end++
		}
		e := digits(r, end)
		if e == end {
			return false
		}
		for _, c := range r[end:e] {
			if exp = exp*10 + int(c-'0'); exp > len(r) {
				exp = len(r) + 1 // past every digit the literal has: the sign decides
				break
			}
		}
		if neg {
			exp = -exp
		}
		end = e
	}
	if end != len(r) {
		return false
	}
	// The digits, integer part then fraction, with the point after
	// intEnd+exp of them: an integer when every digit after it is 0.
	all := r[:intEnd] + r[fracStart:fracEnd]
	point := max(intEnd+exp, 0)
	for i := point; i < len(all); i++ {
		if all[i] != '0' {
			return false
		}
	}
	return true
}

// digits returns the end of the run of decimal digits in s from i.
func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

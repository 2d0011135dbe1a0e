package toolloop

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Calculate evaluates an arithmetic expression: numbers with decimals,
// + - * / ^ (right-associative, binding tighter than unary minus, so -2^2 is
// -4), parentheses and unary minus/plus. It never panics: input length and
// nesting are bounded, and division by zero or a non-finite result is an
// error. Safe for concurrent use.
func Calculate(expr string) (float64, error) {
	if len(expr) > maxCalcLen {
		return 0, fmt.Errorf("expression longer than %d characters", maxCalcLen)
	}
	p := calcParser{s: expr}
	v, err := p.expr()
	if err != nil {
		return 0, err
	}
	p.space()
	if p.i < len(p.s) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.s[p.i], p.i+1)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, errors.New("the result is not a finite number")
	}
	return v, nil
}

const (
	maxCalcLen   = 4096
	maxCalcDepth = 64
)

type calcParser struct {
	s     string
	i     int
	depth int
}

func (p *calcParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *calcParser) peek() byte {
	p.space()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// expr = term { ("+"|"-") term }
func (p *calcParser) expr() (float64, error) { return p.binary('+', '-', p.term) }

// term = unary { ("*"|"/") unary }
func (p *calcParser) term() (float64, error) { return p.binary('*', '/', p.unary) }

// binary parses operand { (op1|op2) operand }, left-associative: one
// precedence level of the grammar.
func (p *calcParser) binary(op1, op2 byte, operand func() (float64, error)) (float64, error) {
	v, err := operand()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != op1 && op != op2 {
			return v, nil
		}
		at := p.i + 1
		p.i++
		r, err := operand()
		if err != nil {
			return 0, err
		}
		switch op {
		case '+':
			v += r
		case '-':
			v -= r
		case '*':
			v *= r
		case '/':
			if r == 0 {
				return 0, fmt.Errorf("division by zero at position %d", at)
			}
			v /= r
		}
	}
}

// unary = ("-"|"+") unary | power
func (p *calcParser) unary() (float64, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	switch p.peek() {
	case '-':
		p.i++
		v, err := p.unary()
		return -v, err
	case '+':
		p.i++
		return p.unary()
	}
	return p.power()
}

// power = primary [ "^" unary ]
func (p *calcParser) power() (float64, error) {
	b, err := p.primary()
	if err != nil {
		return 0, err
	}
	if p.peek() != '^' {
		return b, nil
	}
	p.i++
	e, err := p.unary()
	if err != nil {
		return 0, err
	}
	return math.Pow(b, e), nil
}

// primary = number | "(" expr ")"
func (p *calcParser) primary() (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		p.i++
		v, err := p.expr()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ')' at position %d", p.i+1)
		}
		p.i++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.i
		for p.i < len(p.s) && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] == '.') {
			p.i++
		}
		v, err := strconv.ParseFloat(p.s[start:p.i], 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q at position %d", p.s[start:p.i], start+1)
		}
		return v, nil
	case c == 0:
		return 0, errors.New("unexpected end of expression")
	default:
		return 0, fmt.Errorf("unexpected %q at position %d", c, p.i+1)
	}
}

func (p *calcParser) enter() error {
	p.depth++
	if p.depth > maxCalcDepth {
		return fmt.Errorf("expression nested deeper than %d", maxCalcDepth)
	}
	return nil
}

func (p *calcParser) leave() { p.depth-- }

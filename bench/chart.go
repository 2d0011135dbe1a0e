package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// series is one line of a chart panel.
type series struct {
	name  string
	color string
	pts   [][2]float64 // x, y
}

// hline is a horizontal reference line.
type hline struct {
	y     float64
	label string
}

var targetColors = map[string]string{"direct": "#4c78a8", "floor": "#72b7b2", "gateway": "#e45756"}

// chartSVG draws the latency-versus-load chart of the sweep: p99 latency of
// each target (left) and the p99 each proxy adds over direct (right), both
// against the offered rate, log-scaled in y. It returns "" without sweep legs.
func chartSVG(res *results) string {
	sw := res.scenario("sweep")
	if sw == nil || len(sw.Legs) == 0 {
		return ""
	}
	lat := map[string]*series{}
	add := map[string]*series{}
	for _, l := range sw.Legs {
		if l.Latency == nil || l.Superseded || strings.HasSuffix(l.Step, againStep) && l.Target == "direct" {
			continue // a step measured again is drawn with its second measurement (the judged added p99 on the right)
		}
		if lat[l.Target] == nil {
			lat[l.Target] = &series{name: l.Target, color: targetColors[l.Target]}
		}
		lat[l.Target].pts = append(lat[l.Target].pts, [2]float64{l.OfferedRPS, l.Latency.P99 / 1000})
		if p99, ok := addedP99(l); ok && l.Target != "direct" {
			if add[l.Target] == nil {
				add[l.Target] = &series{name: l.Target + " − direct", color: targetColors[l.Target]}
			}
			add[l.Target].pts = append(add[l.Target].pts, [2]float64{l.OfferedRPS, math.Max(p99/1000, 0.01)})
		}
	}
	order := func(m map[string]*series) []*series {
		var out []*series
		for _, k := range []string{"direct", "floor", "gateway"} {
			if s := m[k]; s != nil {
				out = append(out, s)
			}
		}
		return out
	}
	const W, H = 1000, 470
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", W, H)
	fmt.Fprintf(&sb, `<text x="%d" y="22" font-size="15" font-weight="bold" text-anchor="middle">Latency versus load: non-streaming, open model (%s mode, %s)</text>`+"\n",
		W/2, res.Settings.Mode, xmlEscape(res.Started[:10]))
	fmt.Fprintf(&sb, `<text x="%d" y="40" fill="#555" text-anchor="middle">%s; mock first byte %g ms</text>`+"\n",
		W/2, xmlEscape(res.Machine.Note), res.Settings.FirstByteMS)
	panel(&sb, 70, 60, 380, 330, "p99 latency (ms, log)", order(lat), nil)
	panel(&sb, 580, 60, 380, 330, "added p99 over direct (ms, log; ≤ 0.01 drawn at 0.01)", order(add),
		[]hline{{1, fmt.Sprintf("1 ms target at %d rps", fixedSweepRate)}, {10, "10 ms saturation bar"}})
	sb.WriteString("</svg>\n")
	return sb.String()
}

// panel draws one log-y line chart at (x0, y0) of size w×h.
func panel(sb *strings.Builder, x0, y0, w, h float64, title string, ss []*series, lines []hline) {
	xmax, ymin, ymax := 0.0, math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		sort.Slice(s.pts, func(i, j int) bool { return s.pts[i][0] < s.pts[j][0] })
		for _, p := range s.pts {
			xmax = math.Max(xmax, p[0])
			ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
		}
	}
	for _, l := range lines {
		ymin, ymax = math.Min(ymin, l.y), math.Max(ymax, l.y)
	}
	if xmax == 0 || math.IsInf(ymin, 0) {
		return
	}
	lo := math.Pow(10, math.Floor(math.Log10(math.Max(ymin, 1e-3))))
	hi := math.Pow(10, math.Ceil(math.Log10(math.Max(ymax*1.5, lo*10)))) // headroom for line labels
	xmax = niceCeil(xmax)
	px := func(x float64) float64 { return x0 + x/xmax*w }
	py := func(y float64) float64 {
		y = math.Max(y, lo)
		return y0 + h - (math.Log10(y)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*h
	}
	fmt.Fprintf(sb, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-8, xmlEscape(title))
	fmt.Fprintf(sb, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", x0, y0, w, h)
	for d := lo; d <= hi*1.0001; d *= 10 {
		y := py(d)
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+w, y)
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, fmtTick(d))
	}
	for i := 0; i <= 5; i++ {
		x := xmax * float64(i) / 5
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", px(x), y0, px(x), y0+h)
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), y0+h+16, fmtTick(x))
	}
	fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" text-anchor="middle">offered rate (requests/s)</text>`+"\n", x0+w/2, y0+h+34)
	for _, l := range lines {
		y := py(l.y)
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="5,4"/>`+"\n", x0, y, x0+w, y)
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f" fill="#666" text-anchor="end">%s</text>`+"\n", x0+w-4, y-4, xmlEscape(l.label))
	}
	for i, s := range ss {
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
		}
		fmt.Fprintf(sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.color)
		for _, p := range s.pts {
			fmt.Fprintf(sb, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p[0]), py(p[1]), s.color)
		}
		ly := y0 + h + 52 + float64(i)*0
		lx := x0 + float64(i)*(w/3)
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly-4, lx+22, ly-4, s.color)
		fmt.Fprintf(sb, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, ly, xmlEscape(s.name))
	}
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gk", v/1000)
	case v >= 1:
		return fmt.Sprintf("%g", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

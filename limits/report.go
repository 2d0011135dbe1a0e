package limits

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// maxReportDays bounds one usage query.
const maxReportDays = 400

// UsageQuery selects usage for Report: one tenant or all (""), whole UTC
// days from From to To inclusive, grouped by "model", "key", "day" or
// "tenant".
type UsageQuery struct {
	Tenant   string
	From, To time.Time
	GroupBy  string
}

// UsageRow is one group of a usage report.
type UsageRow struct {
	Group        string  `json:"group"`
	Requests     int64   `json:"requests"`
	Calls        int64   `json:"upstream_calls"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	CostMicro    int64   `json:"cost_microdollars"`
	CostUSD      float64 `json:"cost_usd"`
}

// counters are r's counters in usageRow order (mRequests, mCalls, ...).
func (r *UsageRow) counters() [numMetrics]*int64 {
	return [numMetrics]*int64{
		mRequests: &r.Requests,
		mCalls:    &r.Calls,
		mInput:    &r.InputTokens,
		mOutput:   &r.OutputTokens,
		mCached:   &r.CachedTokens,
		mCost:     &r.CostMicro,
	}
}

// Report returns the usage JSON for q: {"object":"list","group_by",
// "from","to","data":[rows...],"total":{...}}. It first writes this
// replica's queued records, so a report includes every request answered
// before it.
func (l *Limiter) Report(ctx context.Context, q UsageQuery) ([]byte, error) {
	if q.GroupBy == "" {
		q.GroupBy = "model"
	}
	switch q.GroupBy {
	case "model", "key", "day", "tenant":
	default:
		return nil, pipeline.BadRequest("group_by", "group_by must be one of model, key, day, tenant")
	}
	from, to := q.From.UTC().Truncate(24*time.Hour), q.To.UTC().Truncate(24*time.Hour)
	if to.Before(from) {
		return nil, pipeline.BadRequest("from", "from must not be after to")
	}
	if to.Sub(from) > maxReportDays*24*time.Hour {
		return nil, pipeline.BadRequest("from", "a report covers at most %d days", maxReportDays)
	}
	l.rec.flushNew() // what is queued, never waiting on retries of a failed write
	var keys, days []string
	for d := from; !d.After(to); d = d.Add(24 * time.Hour) {
		keys = append(keys, l.prefix+"usage:"+d.Format("20060102"))
		days = append(days, d.Format("2006-01-02"))
	}
	hashes, err := l.store.Usage(ctx, keys)
	if err != nil {
		return nil, pipeline.Unavailable(pipeline.CodeUsageUnavailable, time.Second, err, "Usage cannot be read right now.")
	}
	groups := map[string]*UsageRow{}
	total := UsageRow{Group: "total"}
	for i, h := range hashes {
		for field, n := range h {
			parts := strings.Split(field, "\x1f")
			if len(parts) != 4 || (q.Tenant != "" && parts[0] != q.Tenant) {
				continue
			}
			var g string
			switch q.GroupBy {
			case "model":
				g = parts[2]
			case "key":
				g = parts[1]
			case "tenant":
				g = parts[0]
			default:
				g = days[i]
			}
			row := groups[g]
			if row == nil {
				row = &UsageRow{Group: g}
				groups[g] = row
			}
			if m := slices.Index(metricNames[:], parts[3]); m >= 0 {
				*row.counters()[m] += n
				*total.counters()[m] += n
			}
		}
	}
	rows := make([]UsageRow, 0, len(groups))
	for _, r := range groups {
		r.CostUSD = float64(r.CostMicro) / 1e6
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Group < rows[j].Group })
	total.CostUSD = float64(total.CostMicro) / 1e6
	return json.Marshal(struct {
		Object  string     `json:"object"`
		GroupBy string     `json:"group_by"`
		From    string     `json:"from"`
		To      string     `json:"to"`
		Tenant  string     `json:"tenant,omitempty"`
		Data    []UsageRow `json:"data"`
		Total   UsageRow   `json:"total"`
	}{"list", q.GroupBy, days[0], days[len(days)-1], q.Tenant, rows, total})
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// durationFlag is -duration: plain seconds ("6", "0.6", as the measuring
// modes always took) or a Go duration ("30m").
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		*d = durationFlag(v * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want seconds or a duration such as 30m: %w", err)
	}
	*d = durationFlag(v)
	return nil
}

// soakMain runs -mode soak and returns the exit status: 0 passed, 1 failed
// (drift, errors, or the run could not start), 2 bad flags.
func soakMain(out, repo string, d time.Duration, rate float64) int {
	if d == 0 {
		d = 2 * time.Minute
	}
	if d < 30*time.Second || rate <= 0 {
		fmt.Fprintln(os.Stderr, "bench: soak needs -duration of at least 30s and a positive -rate")
		return 2
	}
	if repo == "" {
		var err error
		if repo, err = moduleRoot(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak(ctx, repo, d, rate)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: soak:", err)
		return 1
	}
	dir := filepath.Join(out, "soak-"+res.Settings.Duration)
	if err := writeSoakResults(res, dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Printf("\nwrote %s/{results.json,results.md}\n", dir)
	for _, c := range res.Drift {
		fmt.Printf("drift %-10s first %g, last %g, floor %g: %+.2f%% (limit %g%%)\n", c.Metric, c.First, c.Last, c.Floor, c.DriftPct, c.LimitPct)
	}
	if ic := res.Idle; ic != nil {
		fmt.Printf("idle goroutines %d → %d, fds %d → %d (settled in %gs)\n", ic.GoroutinesBefore, ic.GoroutinesAfter, ic.FDsBefore, ic.FDsAfter, ic.SettledSeconds)
	}
	for _, k := range res.Kinds {
		fmt.Printf("traffic %-16s ok %6d errors %d %s\n", k.Name, k.OK, k.Errors, k.ErrorSample)
	}
	if !res.Passed {
		for _, f := range res.Failures {
			fmt.Println("FAILED:", f)
		}
		return 1
	}
	fmt.Printf("soak passed (%d requests in %.0f s)\n", res.Requests, res.WallSeconds)
	return 0
}

package mcpclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/gateway/observe"
)

// A panic in a bounded call's function runs on a goroutine of its own,
// which no request's recovery covers: it is recovered there, counted
// (gateway_panics_total) and returned as the call's error, whether or not
// the caller still waits. Without the recovery it ends the test binary.
// Not parallel: it counts the process's panics.
func TestBoundedCallPanicIsAnError(t *testing.T) {
	before := testutil.ToFloat64(observe.Panics)
	_, err := bounded(context.Background(), func() (int, error) { panic("a bug in the SDK") }, 0, nil)
	var pe *panicError
	if !errors.As(err, &pe) || pe.p != "a bug in the SDK" || len(pe.stack) == 0 {
		t.Fatalf("err %v, want the panic as a panicError with its stack", err)
	}
	// The caller left before the panic: it is counted all the same.
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	go func() { <-time.After(10 * time.Millisecond); cancel() }()
	_, err = bounded(ctx, func() (int, error) { <-release; panic("a late bug") }, 0, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the caller's context's", err)
	}
	close(release)
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(observe.Panics)-before < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := testutil.ToFloat64(observe.Panics) - before; n != 2 {
		t.Fatalf("gateway_panics_total rose by %v, want 2", n)
	}
}

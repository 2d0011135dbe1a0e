package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// writeProfileTops writes `go tool pprof -top` of the gateway's CPU profile
// (by time spent in each function) and allocation profile (by bytes
// allocated) beside
// them, so the top of each can be committed with the results.
func writeProfileTops(dir string) error {
	for _, p := range []struct{ profile, top, index string }{
		{"gateway.cpu.pprof", "gateway.cpu.top.txt", ""},
		{"gateway.allocs.pprof", "gateway.allocs.top.txt", "-sample_index=alloc_space"},
	} {
		args := []string{"tool", "pprof", "-top", "-nodecount=40"}
		if p.index != "" {
			args = append(args, p.index)
		}
		out, err := exec.Command("go", append(args, filepath.Join(dir, p.profile))...).Output()
		if err != nil {
			return fmt.Errorf("pprof %s: %w", p.profile, err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.top), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

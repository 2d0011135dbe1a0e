package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// writeProfileTops writes `go tool pprof -top` of each gateway CPU profile
// in dir (by time spent in each function) and allocation profile (by bytes
// allocated) beside it, so the top of each can be committed with the
// results. The main gateway's profiles are gateway.*; a scenario that starts
// a gateway of its own profiles it as gateway-SCENARIO.*.
func writeProfileTops(dir string) error {
	profiles, err := filepath.Glob(filepath.Join(dir, "gateway*.pprof"))
	if err != nil {
		return err
	}
	for _, profile := range profiles {
		args := []string{"tool", "pprof", "-top", "-nodecount=40"}
		if strings.HasSuffix(profile, ".allocs.pprof") {
			args = append(args, "-sample_index=alloc_space")
		}
		out, err := exec.Command("go", append(args, profile)...).Output()
		if err != nil {
			return fmt.Errorf("pprof %s: %w", filepath.Base(profile), err)
		}
		if err := os.WriteFile(strings.TrimSuffix(profile, ".pprof")+".top.txt", out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

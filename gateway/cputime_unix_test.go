//go:build unix

package gateway

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process has used (user and system,
// every thread: the garbage collector and background exporters included),
// or 0 where it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

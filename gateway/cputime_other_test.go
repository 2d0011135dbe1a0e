//go:build !unix

package gateway

import "time"

// processCPU cannot be read here.
func processCPU() time.Duration { return 0 }

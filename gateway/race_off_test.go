//go:build !race

package gateway

// raceBuild reports whether the tests run with the race detector, whose
// instrumentation moves more values to the heap.
const raceBuild = false

// Package modroot finds the module's source tree, for the programs and tests
// that build or read the repository (bench, the process tests).
package modroot

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNotFound is returned when no directory at or above the working one
// holds a go.mod.
var ErrNotFound = errors.New("modroot: no go.mod above the working directory")

// Dir returns the nearest directory at or above the working one that holds
// go.mod.
func Dir() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", ErrNotFound
		}
		d = p
	}
}

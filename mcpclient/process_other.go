//go:build !linux

package mcpclient

import "os/exec"

func isolate(*exec.Cmd) {}

func killGroup(int) {}

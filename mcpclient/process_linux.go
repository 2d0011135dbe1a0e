package mcpclient

import (
	"os/exec"
	"syscall"
)

// isolate puts a stdio server in its own process group (so that closing it
// also ends the grandchildren a launcher such as npx starts) and has the
// kernel kill it if the gateway dies first.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup ends what is left of a stdio server's process group.
func killGroup(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

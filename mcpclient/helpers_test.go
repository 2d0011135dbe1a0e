package mcpclient

import "runtime"

func runtimeGOOS() string { return runtime.GOOS }

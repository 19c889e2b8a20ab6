//go:build !linux

package brokerproc

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

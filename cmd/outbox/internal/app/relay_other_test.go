//go:build !linux

package app

import "syscall"

// relayProcAttr: only Linux has a parent-death signal.
func relayProcAttr() *syscall.SysProcAttr { return nil }

package app

import "syscall"

// relayProcAttr makes the kernel kill a process the tests start when the
// test binary dies, so a crashed test leaves no relay or broker behind.
func relayProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package brokerproc

import "syscall"

// sysProcAttr kills the server with the process that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMark is a reading of the CPU time this process and the store's server
// processes (by command name: "postgres", "redis-server") have used, so a
// workload can say how its time split between the relay and the store.
type cpuMark struct {
	self, server time.Duration
	ok           bool // /proc was readable
}

// clockTick is the kernel's USER_HZ, the unit of /proc/PID/stat's times;
// 100 on every Linux architecture Go supports.
const clockTick = 100

func readCPU(server string) cpuMark {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuMark{}
	}
	m := cpuMark{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ok: true}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return cpuMark{}
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != server {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		// utime and stime are fields 14 and 15 of the line, 12 and 13
		// after the command name.
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		m.server += time.Duration(u+st) * time.Second / clockTick
	}
	return m
}

// perEntry returns the CPU time per entry this process and the server used
// between a and b (false when either reading failed). A server process
// that ended in between takes its time with it, so the server figure is a
// lower bound.
func perEntry(a, b cpuMark, n int) (self, server time.Duration, ok bool) {
	if !a.ok || !b.ok || n <= 0 {
		return 0, 0, false
	}
	return (b.self - a.self) / time.Duration(n), max(b.server-a.server, 0) / time.Duration(n), true
}

// busyMark is a reading of the machine's CPU time (/proc/stat's cpu line),
// in clock ticks: all of it and the idle part (idle and iowait).
type busyMark struct {
	total, idle int64
	ok          bool
}

func readBusy() busyMark {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return busyMark{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return busyMark{}
	}
	var m busyMark
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return busyMark{}
		}
		if i >= 7 { // guest time is counted in user time already
			break
		}
		m.total += n
		if i == 3 || i == 4 {
			m.idle += n
		}
	}
	m.ok = true
	return m
}

// to returns how busy the machine's CPUs were from a to b, in percent of
// all of them, or -1 when a reading failed.
func (a busyMark) to(b busyMark) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return -1
	}
	return 100 * (1 - float64(b.idle-a.idle)/float64(b.total-a.total))
}

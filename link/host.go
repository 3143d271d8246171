package link

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// host is what the link reports about the machine: read from /proc and
// /sys on Linux, from the runtime elsewhere. Nothing here is assumed:
// what cannot be read is reported as zero, empty or absent.
type host struct {
	hw        hardware
	memTotal  int64 // bytes
	osVersion string
	// rdmaFree reports that the machine has no RDMA device; nil when
	// that cannot be told.
	rdmaFree *bool
}

const gib = 1 << 30

// probeHost reads the machine's description once.
func probeHost() host {
	h := host{osVersion: runtime.GOOS}
	h.hw.CPUCores.Total = runtime.NumCPU()
	h.hw.ChipName = runtime.GOOS + "/" + runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if name := cpuName(string(b)); name != "" {
			h.hw.ChipName = name
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total, avail := memInfo(string(b))
		h.memTotal = total
		h.hw.MemoryGB = int(math.Round(float64(total) / gib))
		h.hw.MemoryAvailableGB = float64(avail) / gib
	}
	for _, p := range []string{"/sys/class/dmi/id/product_name", "/proc/device-tree/model"} {
		if b, err := os.ReadFile(p); err == nil {
			if m := strings.Trim(string(b), " \n\x00"); m != "" {
				h.hw.MachineModel = m
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.osVersion += " " + strings.TrimSpace(string(b))
	}
	if runtime.GOOS == "linux" {
		// RDMA devices, InfiniBand or RoCE, all appear here.
		entries, err := os.ReadDir("/sys/class/infiniband")
		switch {
		case os.IsNotExist(err):
			free := true
			h.rdmaFree = &free
		case err == nil:
			free := len(entries) == 0
			h.rdmaFree = &free
		}
	}
	return h
}

// cpuName is the processor's name in /proc/cpuinfo text: "model name"
// (x86), else "Hardware" (some ARM kernels); "" when neither is there.
func cpuName(cpuinfo string) string {
	var hw string
	sc := bufio.NewScanner(strings.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			return strings.TrimSpace(v)
		case "Hardware":
			hw = strings.TrimSpace(v)
		}
	}
	return hw
}

// memInfo returns MemTotal and MemAvailable in bytes from /proc/meminfo
// text; 0 for a field that is missing.
func memInfo(meminfo string) (total, avail int64) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 2 && f[2] == "kB" {
			n <<= 10
		}
		switch f[0] {
		case "MemTotal:":
			total = n
		case "MemAvailable:":
			avail = n
		}
	}
	return total, avail
}

// cpuTimes returns the idle (idle + iowait) and total jiffies of the
// aggregate "cpu" line of /proc/stat text.
func cpuTimes(stat string) (idle, total uint64, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return idle, total, true
}

// loadMeter turns successive /proc samples into the heartbeat's system
// metrics. CPU usage is the busy share of the time between two samples,
// so the first sample reports 0.
type loadMeter struct {
	idle, total uint64
	primed      bool
}

// sample reads the metrics now. Thermal state is not measured here and
// says so.
func (m *loadMeter) sample() systemMetrics {
	sm := systemMetrics{ThermalState: "unknown"}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if total, avail := memInfo(string(b)); total > 0 {
			sm.MemoryPressure = clamp01(1 - float64(avail)/float64(total))
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		sm.CPUUsage = m.next(string(b))
	}
	return sm
}

// next folds one /proc/stat sample in and returns the busy share since
// the previous one.
func (m *loadMeter) next(stat string) float64 {
	idle, total, ok := cpuTimes(stat)
	if !ok {
		return 0
	}
	var u float64
	if m.primed && total > m.total {
		u = clamp01(1 - float64(idle-min(idle, m.idle))/float64(total-m.total))
	}
	m.idle, m.total, m.primed = idle, total, true
	return u
}

func clamp01(x float64) float64 { return max(0, min(1, x)) }

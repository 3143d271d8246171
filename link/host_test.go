package link

import "testing"

func TestCPUName(t *testing.T) {
	x86 := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t\t: fpu\n"
	arm := "processor\t: 0\nBogoMIPS\t: 48.00\nCPU part\t: 0xd0c\nHardware\t: BCM2835\n"
	for in, want := range map[string]string{x86: "Intel(R) Xeon(R) CPU @ 2.20GHz", arm: "BCM2835", "": ""} {
		if got := cpuName(in); got != want {
			t.Errorf("cpuName = %q, want %q", got, want)
		}
	}
}

func TestMemInfo(t *testing.T) {
	total, avail := memInfo("MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8192000 kB\n")
	if total != 16384000<<10 || avail != 8192000<<10 {
		t.Errorf("memInfo = %d, %d", total, avail)
	}
}

func TestLoadMeter(t *testing.T) {
	var m loadMeter
	// user nice system idle iowait irq softirq steal
	if u := m.next("cpu  100 0 100 700 100 0 0 0\ncpu0 1 2 3 4\n"); u != 0 {
		t.Errorf("first sample %v, want 0", u)
	}
	// 100 more jiffies, 25 of them idle or waiting.
	if u := m.next("cpu  150 0 125 720 105 0 0 0\n"); u != 0.75 {
		t.Errorf("busy share %v, want 0.75", u)
	}
	if u := m.next("garbage"); u != 0 {
		t.Errorf("unreadable sample %v", u)
	}
}

package mlx

import "testing"

func TestDeviceMemory(t *testing.T) {
	th := NewThread()
	defer th.Close()
	th.Do(func() {
		cpu := CPU()
		defer cpu.Free()
		m, err := cpu.DeviceMemory()
		if err != nil {
			t.Fatal(err)
		}
		if m.GPU {
			t.Errorf("CPU stream: %+v, want GPU false", m)
		}
		checkDeviceMemory(t, "CPU", m)

		def := DefaultStream()
		defer def.Free()
		m, err = def.DeviceMemory()
		if err != nil {
			t.Fatal(err)
		}
		gpu, err := GPUAvailable()
		if err != nil {
			t.Fatal(err)
		}
		if m.GPU != gpu {
			t.Errorf("default stream: %+v, want GPU %v", m, gpu)
		}
		if m.GPU && m.Total <= 0 {
			t.Errorf("default GPU stream: %+v, want a positive total", m)
		}
		checkDeviceMemory(t, "default", m)

		var freed Stream
		if _, err := freed.DeviceMemory(); err == nil {
			t.Error("DeviceMemory of a freed stream succeeded")
		}
	})
}

func checkDeviceMemory(t *testing.T, name string, m DeviceMemory) {
	t.Helper()
	t.Logf("%s stream: %+v", name, m)
	if m.Total < 0 || (m.Total == 0) != (m.TotalKey == "") {
		t.Errorf("%s stream: total %d from key %q", name, m.Total, m.TotalKey)
	}
	if m.Free < -1 || m.Total > 0 && m.Free > m.Total {
		t.Errorf("%s stream: free %d of %d", name, m.Free, m.Total)
	}
}

package actors

import "testing"

func TestFingerprint(t *testing.T) {
	long := make([]byte, 10000)
	other := append([]byte(nil), long...)
	other[5000] = 'x' // the middle of a long body is not read
	if fingerprintOf(long) != fingerprintOf(other) {
		t.Fatal("the fingerprint reads the middle of a long body")
	}
	if fingerprintOf([]byte(`{"prompt":"a"}`)) == fingerprintOf([]byte(`{"prompt":"b"}`)) ||
		fingerprintOf(long) == fingerprintOf(long[:9999]) || fingerprintOf(nil) == 0 {
		t.Fatal("fingerprints collide")
	}
}

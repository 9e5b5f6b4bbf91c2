package health

import "testing"

func TestFingerprint(t *testing.T) {
	long := make([]byte, 10000)
	other := append([]byte(nil), long...)
	other[5000] = 'x' // the middle of a long body is not read
	if Fingerprint(long) != Fingerprint(other) {
		t.Fatal("the fingerprint reads the middle of a long body")
	}
	if Fingerprint([]byte(`{"prompt":"a"}`)) == Fingerprint([]byte(`{"prompt":"b"}`)) ||
		Fingerprint(long) == Fingerprint(long[:9999]) || Fingerprint(nil) == 0 {
		t.Fatal("fingerprints collide")
	}
}

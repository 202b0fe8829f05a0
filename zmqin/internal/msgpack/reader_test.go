package msgpack

import (
	"errors"
	"slices"
	"testing"
)

// TestUints: Uints reads what AppendUint writes in every width (the 0xcf
// fast path and Integer's others) as a loop of Integer does; a negative
// value is ErrType, and a value cut short is an error, never a wrong value.
func TestUints(t *testing.T) {
	want := []uint64{0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 1<<32 - 1, 1 << 32, 1<<63 + 5, ^uint64(0)}
	var b []byte
	for _, v := range want {
		b = AppendUint(b, v)
	}
	b = AppendInt(b, 9) // a non-negative int in a signed encoding also reads
	got := make([]uint64, len(want)+1)
	r := &Reader{B: b}
	if err := r.Uints(got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, append(want, 9)) || r.Left() != 0 {
		t.Fatalf("got %v, %d bytes left", got, r.Left())
	}

	r = &Reader{B: AppendInt(AppendUint(nil, 5), -3)}
	if err := r.Uints(make([]uint64, 2)); !errors.Is(err, ErrType) {
		t.Fatalf("a negative value: %v, want ErrType", err)
	}
	cut := AppendUint(AppendUint(nil, 1<<40), 1<<41)
	for n := len(cut) - 8; n < len(cut); n++ {
		dst := make([]uint64, 2)
		if err := (&Reader{B: cut[:n]}).Uints(dst); err == nil {
			t.Fatalf("%d of %d bytes read as %v", n, len(cut), dst)
		}
	}
}

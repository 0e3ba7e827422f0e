package jsonscan

import "testing"

func TestPlainString(t *testing.T) {
	for _, tt := range []struct {
		in       string
		from, to int
		ok       bool
	}{
		{`"abc"`, 1, 4, true},
		{`""`, 1, 1, true},
		{`"a\"b"`, 0, 0, false},
		{`"é"`, 0, 0, false},
		{"\"a\tb\"", 0, 0, false},
		{`"abc`, 0, 0, false},
		{`abc`, 0, 0, false},
	} {
		from, to, ok := PlainString([]byte(tt.in), 0)
		if from != tt.from || to != tt.to || ok != tt.ok {
			t.Errorf("PlainString(%s) = %d, %d, %v; want %d, %d, %v", tt.in, from, to, ok, tt.from, tt.to, tt.ok)
		}
	}
}

func TestSpaceAndNull(t *testing.T) {
	if i := Space([]byte(" \t\r\nnull"), 0); i != 4 {
		t.Errorf("Space = %d; want 4", i)
	}
	if i, ok := Null([]byte("xnull"), 1); !ok || i != 5 {
		t.Errorf("Null = %d, %v; want 5, true", i, ok)
	}
	if _, ok := Null([]byte("nul"), 0); ok {
		t.Error("Null took nul")
	}
}

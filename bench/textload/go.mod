module kiln/bench/textload

go 1.21

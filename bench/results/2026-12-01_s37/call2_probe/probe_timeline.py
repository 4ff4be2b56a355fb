import sys, statistics as st, collections
names = {4: "kFirst", 3: "kPairs", 2: "pass2", 5: "combine"}
for f in sys.argv[1:]:
    ev = []
    for line in open(f):
        if not line.startswith("PROBE"): continue
        w = line.split()
        ev.append((int(w[2]), int(w[4]), int(w[6]), int(w[8]), int(w[10]), list(map(int, w[12:17]))))
    comb = sorted(e[3] for e in ev if e[0] == 5)
    a = comb[0]
    win = [e for e in ev if a - 1000_000 < e[3] < a + 400_000]
    print("==", f, "anchor combine start; times in us relative to it")
    for p in (4, 3, 5, 2):
        R = [e for e in win if e[0] == p]
        if not R: continue
        g0 = [(e[3] - a) / 1000 for e in R]; g1 = [(e[4] - a) / 1000 for e in R]
        print(f"{names[p]:8} n={len(R):3} start {min(g0):8.1f} .. {max(g0):8.1f}  end {min(g1):8.1f} .. {max(g1):8.1f}")
        if p != 5:
            # per-CTA us using its own clock rate (clk[4] over g1 - g0)
            for i, lab in enumerate(["job entry", "state loaded", "1st stage", "loop end", "exit"]):
                v = [e[5][i] / ((e[4] - e[3]) / 1000) * 0 + e[5][i] / 1800 for e in R]  # 1.8 GHz
                print(f"      {lab:13} us(1.8GHz) med {st.median(v):7.2f} min {min(v):7.2f} max {max(v):7.2f}")

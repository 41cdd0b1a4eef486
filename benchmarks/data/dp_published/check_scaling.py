"""Check dle_scaling.csv: speed-up at each GPU count vs 1 GPU, compared with the
README's own printed scaling figure (flag |diff| > 2%). Run with the project venv."""
import csv, collections, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
def num(s):
    s = (s or "").replace(",", "").replace("x", "").strip()
    pct = s.endswith("%")
    try: v = float(s.rstrip("%"))
    except ValueError: return None
    return v / 100 if pct else v
groups = collections.OrderedDict()
with open(os.path.join(HERE, "dle_scaling.csv"), newline="") as f:
    for r in csv.DictReader(f):
        k = (r["model"], r["framework"], r["system"], r["precision"], r["batch_per_gpu"], r["source"])
        groups.setdefault(k, []).append(r)
nflag = 0; s8 = []
for k, rows in groups.items():
    base = [r for r in rows if r["gpus"] == "1"]
    if not base:
        print("NO 1-GPU ROW", k); continue
    t1 = num(base[0]["throughput"])
    parts = []
    for r in sorted(rows, key=lambda r: int(r["gpus"])):
        g = int(r["gpus"]); 
        if g == 1: continue
        sp = num(r["throughput"]) / t1
        pub = num(r["published_scaling"])
        tag = ""
        if pub is not None and abs(sp / pub - 1) > 0.02:
            tag = " MISMATCH(pub %.2f)" % pub; nflag += 1
        parts.append("%dx:%.2f (eff %.0f%%)%s" % (g, sp, 100 * sp / g, tag))
        if g == 8: s8.append((sp, k))
    print("%-28s %-18s %-26s %-5s b=%-10s | %s" % (k[0], k[1][:18], k[2][:26], k[3], k[4][:10], "  ".join(parts)))
print("\ncases (model,framework,system,precision,batch,source):", len(groups))
print("mismatches >2%% vs published scaling: %d" % nflag)
if s8:
    s8.sort()
    print("8-GPU speed-up range: %.2f (%s) .. %.2f (%s)" % (s8[0][0], " / ".join(s8[0][1][:5]), s8[-1][0], " / ".join(s8[-1][1][:5])))
    ok = [s for s, k in s8 if s <= 8.0]
    print("8-GPU speed-up range excluding superlinear: %.2f .. %.2f (n=%d of %d)" % (min(ok), max(ok), len(ok), len(s8)))

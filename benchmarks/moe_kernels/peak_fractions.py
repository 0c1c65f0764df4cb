"""Each fused-MoE timing's achieved share of peak bandwidth and compute: reads data.csv, writes
peak_fractions.csv (run in benchmarks/moe_kernels/; the peaks are vendor datasheet values)."""
import csv
# Vendor spec-sheet peaks (ASSUMED, not from the sources): (HBM TB/s, dense TFLOPS by dtype class)
PEAK={"H100":(3.35,{"bf16":989,"fp8":1979}),"H800":(3.35,{"bf16":989,"fp8":1979}),"H200":(4.8,{"bf16":989,"fp8":1979}),
"H20":(4.0,{"bf16":148,"fp8":296}),"A100-40":(1.555,{"bf16":312}),"A100-80":(1.935,{"bf16":312}),
"B200":(8.0,{"bf16":2250,"fp8":4500,"fp4":9000})}
def gpu_key(g):
    if g.startswith("H800"):return "H800"
    if g.startswith("H200"):return "H200"
    if g.startswith("H20"):return "H20"
    if g.startswith("H100"):return "H100"
    if "40GB" in g:return "A100-40"
    if g.startswith("A100"):return "A100-80"
    if g.startswith("B200") or "Blackwell" in g:return "B200"
def cls(dt):
    d=dt.lower()
    if "w4a4" in d or d=="nvfp4":return "fp4",0.5625
    if "bf16 act" in d:return "bf16",0.5625   # W4A16: fp4 weights, bf16 MMA
    if "fp8" in d:return "fp8",1.0
    return "bf16",2.0
out=[]
for r in csv.DictReader(open("data.csv")):
    g=gpu_key(r["gpu"]); bw,pk=PEAK[g]
    if r["tflops"]:
        c,_=cls(r["dtype"]); tf=float(r["tflops"]); gb=float(r["gbps"])
        out.append((r["source_url"][:40],r["gpu"][:10],r["kernel"][:45],r["dtype"][:12],r["num_experts"],r["num_tokens"],"",f"{gb/1000/bw:.2f}",f"{tf/pk[c]:.2f}","given"));continue
    if not r["hidden"] or not r["top_k"]: continue
    E=int(r["num_experts"]);k=int(r["top_k"]);H=int(r["hidden"]);N=int(r["inter"]);T=int(r["num_tokens"]);t=float(r["time_us"])*1e-6
    c,bpp=cls(r["dtype"])
    if "EP=8" in r["tp_or_ep"]: Eloc=32; frac=32/256
    else: Eloc=E; frac=1.0
    touched=Eloc*(1-(1-k/E)**T)
    wbytes=touched*3*H*N*bpp
    flops=2*T*k*frac*3*H*N
    out.append((r["source_url"][:40],r["gpu"][:10],r["kernel"][:45],r["dtype"][:12],E,T,f"{r['time_us']}",f"{wbytes/t/1e12/bw:.2f}",f"{flops/t/1e12/pk[c]:.2f}",f"touched={touched:.1f}"))
w=csv.writer(open("peak_fractions.csv","w"));w.writerow(["source","gpu","kernel","dtype","E","tokens","time_us","frac_peak_BW","frac_peak_dense_FLOPS","basis"]);w.writerows(out)
for o in out: print(" | ".join(map(str,o)))

# The phases2 measurement build (bench/measure/README.md): applies per-block %globaltimer
# stamps to the working tree's mv1 products and flash_decode_cluster (never commit them).
# Run from anywhere: python3 bench/measure/phases2_apply.py; undo with
# git checkout src tools && rm src/backends/cuda/kernels/exp_trace.cuh
import os, re, shutil, subprocess
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, '..', '..')) + '/'
K = root + 'src/backends/cuda/kernels/'
shutil.copy(os.path.join(here, 'exp_trace_phases2.cuh'), K + 'exp_trace.cuh')
# timeline.patch's hunk for the cluster kernel's wait no longer applies (session 24 moved the
# wait below the history's prologue): --reject keeps the others, and the stamp is put after
# the wait here.
subprocess.call(['git', 'apply', '--reject', '--include=src/backends/cuda/kernels/attention.cu',
                 '--include=tools/onepass/bench.cpp', 'bench/measure/timeline.patch'], cwd=root)
if os.path.exists(K + 'attention.cu.rej'):
    os.remove(K + 'attention.cu.rej')
a = open(K + 'attention.cu').read()
if '  if (early) pdl_wait();\n  EXP_TRACE_AT(1);' not in a:
    a = a.replace('  if (early) pdl_wait();\n', '  if (early) pdl_wait();\n  EXP_TRACE_AT(1);\n', 1)
a = a.replace('  ptx::mbarrier_wait_phase0(ptx::smem_addr(&slots_full));  // the others\' slots have landed\n',
              '  ptx::mbarrier_wait_phase0(ptx::smem_addr(&slots_full));  // the others\' slots have landed\n  EXP_TRACE_AT(3);\n', 1)
a = a.replace('  cluster.barrier_wait();\n  if (chunk != 0) {', '  cluster.barrier_wait();\n  EXP_TRACE_AT(4);\n  if (chunk != 0) {', 1)
open(K + 'attention.cu', 'w').write(a)
m = open(K + 'matmul.cu').read()
m = m.replace('#include "ptx.cuh"\n', '#include "ptx.cuh"\n#include "exp_trace.cuh"\n', 1)
m = m.replace('namespace onepass::cuda {\nnamespace {\n', 'namespace onepass::cuda {\nnamespace {\nEXP_TRACE_SHARED;\n', 1)
# wait / staged stamps
n0 = m.count('  pdl_wait();\n  const float x_scale = mv1_')
m = m.replace('  pdl_wait();\n  const float x_scale = mv1_', '  pdl_wait();\n  EXP_TRACE_AT(1);\n  const float x_scale = mv1_')
m = m.replace('  mv1_first_pair_request(a, f, sh, first_slots[sh.slot]);\n', '  EXP_TRACE_AT(2);\n  mv1_first_pair_request(a, f, sh, first_slots[sh.slot]);\n')
m = m.replace('  pdl_wait();\n  return mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);\n',
              '  pdl_wait();\n  EXP_TRACE_AT(1);\n  const float xsc_ = mv1_quantize_x(a, f, x_path, inv_rms, scratch, xs);\n  EXP_TRACE_AT(2);\n  return xsc_;\n')
old = '    mv1_finish_rows(a, f, sh, done, part_sums, parity, j0, step_rows, x_scale, first_pass, first_slots[sh.slot]);\n'
new = ('    { const bool fp_ = first_pass && done.count > 0; if (fp_) EXP_TRACE_AT(3);\n' + old +
       '      if (fp_) EXP_TRACE_AT(4); }\n')
n1 = m.count(old)
m = m.replace(old, new)
def wrap(kname, body, tag, sig_args, nn, kk):
    global m
    pat = re.compile(r'(__global__ void __launch_bounds__\([^)]*\)[^\n]*? ' + kname + r'\((' + sig_args + r')\) \{\n)(  ' + re.escape(body) + r'\n)\}')
    mm = pat.search(m)
    assert mm, kname
    m = m[:mm.start()] + mm.group(1) + '  EXP_TRACE_START();\n' + mm.group(3) + '  EXP_TRACE_END(' + tag + ', ' + nn + ', ' + kk + ');\n}' + m[mm.end():]
T = '(W == DType::f16 || W == DType::f32 || W == DType::bf16) ? 2 : 1'
wrap('mv1_kernel', 'mv1_body<W>(a, MvFusion{});', T, r'const __grid_constant__ ops::MatmulArgs a', 'a.n', 'a.k')
wrap('mv1_fused_kernel', 'mv1_body<W>(f.mm, fusion_of(f));', T, r'const __grid_constant__ ops::FusedMatvecArgs f', 'f.mm.n', 'f.mm.k')
wrap('mv1_bulk_kernel', 'mv1_bulk_body<W>(a, MvFusion{});', '4', r'const __grid_constant__ ops::MatmulArgs a', 'a.n', 'a.k')
wrap('mv1_bulk_fused_kernel', 'mv1_bulk_body<W>(f.mm, fusion_of(f));', '4', r'const __grid_constant__ ops::FusedMatvecArgs f', 'f.mm.n', 'f.mm.k')
wrap('mv1_short_kernel', 'mv1_short_body<W>(a, MvFusion{});', '5', r'const __grid_constant__ ops::MatmulArgs a', 'a.n', 'a.k')
wrap('mv1_short_fused_kernel', 'mv1_short_body<W>(f.mm, fusion_of(f));', '5', r'const __grid_constant__ ops::FusedMatvecArgs f', 'f.mm.n', 'f.mm.k')
m = m.rstrip('\n') + '\n\nnamespace onepass::cuda { void exp_trace_dump_matmul(const char* dir) { exptrace::dump(dir, "matmul.bin"); } }\n'
open(K + 'matmul.cu', 'w').write(m)
print('quantize sites', n0, 'finish sites', n1)

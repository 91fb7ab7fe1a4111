"""What a profile for the kernel doctor collects: the Nsight Compute sections and metrics it reads.

`--set full` replays each launch ~40 times (every section ncu ships, memory tables, instruction statistics, PM
sampling). The kernel doctor reads a fraction of that: DOCTOR_METRICS, the metrics its rules, speed of light,
roofline and coverage look up (tests/investigate/test_ncu_one_pass.py checks, on every full-set report in the
repository, that they are all it looks up and that a report cut down to them gets the very same diagnosis), the
warp-stall reasons (the WarpStateStats section's `smsp__average_warps_issue_stalled_*` family, read by prefix) and
the source-level counters of the SourceCounters section (the ideal and actual shared wavefronts and L2 sectors the
bank-conflict and coalescing rules compare). DOCTOR_SECTIONS are the sections that carry those, plus ncu's own
guided analysis for speed of light, launch and occupancy (doctor/ncu_guided.py compares it; it decides nothing).
"""
from __future__ import annotations

DOCTOR_SET = "doctor"      # perflab's name for this choice (ncu_runner.build_command); "full" is ncu's set
DOCTOR_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats", "SourceCounters")
# counters of the SourceCounters section that the raw page names without a unit prefix
SOURCE_METRICS = ("memory_l1_wavefronts_shared", "memory_l1_wavefronts_shared_ideal",
                  "memory_l2_theoretical_sectors_global", "memory_l2_theoretical_sectors_global_ideal")
STALL_FAMILY = r"^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$"   # WarpStateStats

DOCTOR_METRICS = (
    "derived__local_spilling_requests", "derived__smsp__inst_executed_op_branch_pct",
    "device__attribute_display_name", "device__attribute_gpu_pci_ext_gpu_link_rate",
    "device__attribute_gpu_pci_ext_gpu_link_width", "device__attribute_l2_cache_size",
    "device__attribute_l2s_count", "device__attribute_max_gpu_frequency_khz",
    "device__attribute_max_warps_per_multiprocessor", "device__attribute_multiprocessor_count",
    "dram__bytes.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_local_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_atom.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_red.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_miss.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st_lookup_miss.sum",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z", "launch__block_size",
    "launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z", "launch__grid_size",
    "launch__occupancy_limit_barriers", "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps", "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic", "launch__shared_mem_per_block_static", "launch__sm_count",
    "launch__waves_per_multiprocessor",
    "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "lts__d_atomic_input_cycles_active.max.pct_of_peak_sustained_elapsed",
    "lts__t_requests_srcunit_tex_op_atom_dot_alu.sum", "lts__t_requests_srcunit_tex_op_atom_dot_cas.sum",
    "lts__t_requests_srcunit_tex_op_red.sum", "lts__t_sector_op_read_hit_rate.pct", "lts__t_sectors_op_atom.max",
    "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.max", "lts__t_sectors_op_red.sum",
    "lts__t_sectors_srcunit_tex.sum", "lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss.sum",
    "lts__t_sectors_srcunit_tex_aperture_sysmem_op_read.sum",
    "lts__t_sectors_srcunit_tex_aperture_sysmem_op_read_lookup_miss.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
    "lts__t_sectors.sum", "l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_st.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "pcie__read_bytes.sum.per_second",
    "sass__inst_executed_local_loads", "sass__inst_executed_local_stores",
    "sass__inst_executed_register_spilling",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed", "sm__inst_executed_pipe_tensor.sum",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed", "sm__inst_executed_pipe_xu.sum",
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed", "sm__maximum_warps_per_active_cycle_pct",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum", "sm__ops_path_tensor_src_fp64.sum",
    "sm__ops_path_tensor_src_fp8.sum", "sm__ops_path_tensor_src_int8.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__sass_thread_inst_executed_op_dadd_pred_on.sum", "sm__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum", "sm__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__average_warp_latency_per_inst_issued.ratio", "smsp__inst_executed.sum",
    "smsp__inst_executed_op_generic_atom_dot_alu.sum", "smsp__inst_executed_op_generic_atom_dot_cas.sum",
    "smsp__inst_executed_op_global_red.sum", "smsp__inst_executed_op_ldgsts.sum",
    "smsp__inst_executed_op_tma_ld.sum", "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "smsp__sass_inst_executed_op_global_atom.sum", "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_red.sum", "smsp__sass_inst_executed_op_global_st.sum",
    "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
)

# Metrics beyond `--set full` that the rules and the roofline read (each rule says why it reads what).
EXTRA_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    "lts__t_sector_hit_rate.pct", "lts__t_sector_op_read_hit_rate.pct",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_hmul_pred_on.sum", "sm__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dadd_pred_on.sum", "sm__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp8.sum", "sm__ops_path_tensor_src_fp8_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp8_dst_fp32.sum", "sm__ops_path_tensor_src_fp64.sum",
    "sm__ops_path_tensor_src_int8.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
    "smsp__sass_inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_st.sum",
    "smsp__sass_inst_executed_op_global_atom.sum", "smsp__sass_inst_executed_op_global_red.sum",
    "smsp__inst_executed.sum",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_membar_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.sum",
    "sm__inst_executed_pipe_xu.sum",                           # the XU rule: MUFU share of the instructions
    "lts__t_sectors_srcunit_tex_aperture_sysmem_op_read.sum",  # host-memory reads, L2 hits included
)


def doctor_metrics() -> tuple[str, ...]:
    """The metrics a doctor-set profile asks for by name (the sections bring the rest)."""
    return tuple(dict.fromkeys(DOCTOR_METRICS + EXTRA_METRICS))

//! The 8-bit path's element-wise steps, fused into single passes over rows of f32 (candle custom
//! ops, CPU only). Done as candle's separate operations (bias, residual, LayerNorm, GELU through
//! libm's scalar `erff`, softmax through `expf`), each an allocation and a pass of its own, they
//! cost a third of a 32-token embedding; fused, 9.4 ms became 6.8 ms.
//!
//! Plain loops without branches in their bodies, so they vectorize at the baseline x86-64
//! target; no `unsafe`.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape};

/// The contiguous f32 values of a tensor, or an error naming the op.
fn values<'a>(name: &str, storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((start, end))) => Ok(&data[start..end]),
        _ => candle_core::bail!("{name} takes a contiguous f32 tensor"),
    }
}

/// Sum of `f(v)` over `values`, with eight accumulators so the loop vectorizes.
fn sum_of(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (a, v) in acc.iter_mut().zip(chunk) {
            *a += f(*v);
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().map(|v| f(*v)).sum::<f32>()
}

/// erf(x) as a rational function of x, within about 1e-7 of the exact value (the approximation
/// Eigen uses for f32): no branch and no exponential.
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906_3e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329e-3;
    q = q * x2 - 1.426_474e-2;
    x * p / q
}

/// GELU as BERT defines it, `x·Φ(x)` with erf.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// e^x for x ≤ 0 (softmax's shifted scores), within a few ulp: 2^n · p(r) with n the nearest
/// integer to x·log2(e), found by the 1.5·2^23 rounding trick rather than a call to `roundf`.
fn exp_non_positive(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    // x - n·ln 2 in two parts, so r keeps its low bits.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_66;
    p = p * r + 0.5;
    p = p * r * r + r + 1.0;
    // n is an integer in [-126, 0] here, so the exponent bits are in range.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// Multiplies each input channel by its scale and appends zero channels (an 8-bit product's
/// input: smoothed, and as wide as the kernels take), in one pass.
pub struct Prepare {
    pub inv_scale: Vec<f32>,
    pub pad: usize,
}

impl CustomOp1 for Prepare {
    fn name(&self) -> &'static str {
        "herma-prepare"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let data = values(self.name(), storage, layout)?;
        let (rows, width) = layout.shape().dims2()?;
        if width != self.inv_scale.len() {
            candle_core::bail!(
                "herma-prepare: {width} channels, {} scales",
                self.inv_scale.len()
            );
        }
        let padded = width + self.pad;
        let mut out = vec![0f32; rows * padded];
        for (row, dst) in data.chunks_exact(width).zip(out.chunks_exact_mut(padded)) {
            for ((d, x), s) in dst.iter_mut().zip(row).zip(&self.inv_scale) {
                *d = x * s;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((rows, padded))))
    }
}

/// `gelu(x + bias)` over rows of `bias.len()` values.
pub struct BiasGelu {
    pub bias: Vec<f32>,
}

impl CustomOp1 for BiasGelu {
    fn name(&self) -> &'static str {
        "herma-bias-gelu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(self.name(), storage, layout)?;
        let width = self.bias.len();
        if width == 0 || x.len() % width != 0 {
            candle_core::bail!("{}: rows of {width} expected", self.name());
        }
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks_exact(width) {
            out.extend(row.iter().zip(&self.bias).map(|(v, b)| gelu(v + b)));
        }
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// `LayerNorm(x + bias + residual)`: a linear layer's bias, BERT's residual connection and the
/// normalization that follows it, in one pass per row.
pub struct BiasResidualNorm {
    pub bias: Vec<f32>,
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub eps: f32,
}

impl CustomOp2 for BiasResidualNorm {
    fn name(&self) -> &'static str {
        "herma-bias-residual-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = values(self.name(), s1, l1)?;
        let residual = values(self.name(), s2, l2)?;
        let width = self.bias.len();
        if width == 0 || x.len() % width != 0 || residual.len() != x.len() {
            candle_core::bail!("{}: two equal tensors of rows of {width}", self.name());
        }
        #[allow(clippy::cast_precision_loss)]
        let n = width as f32;
        let mut out = vec![0f32; x.len()];
        for ((row, res), dst) in x
            .chunks_exact(width)
            .zip(residual.chunks_exact(width))
            .zip(out.chunks_exact_mut(width))
        {
            for (((d, v), r), b) in dst.iter_mut().zip(row).zip(res).zip(&self.bias) {
                *d = v + b + r;
            }
            let mean = sum_of(dst, |v| v) / n;
            for d in dst.iter_mut() {
                *d -= mean;
            }
            let inv_std = 1.0 / (sum_of(dst, |v| v * v) / n + self.eps).sqrt();
            for ((d, g), b) in dst.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *d = *d * inv_std * g + b;
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Softmax over the last dimension.
pub struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "herma-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(self.name(), storage, layout)?;
        let width = layout.shape().dims().last().copied().unwrap_or(0);
        if width == 0 {
            candle_core::bail!("{}: an empty last dimension", self.name());
        }
        let mut out = vec![0f32; x.len()];
        for (row, dst) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            for (d, v) in dst.iter_mut().zip(row) {
                *d = exp_non_positive(v - max);
            }
            let inv = 1.0 / sum_of(dst, |v| v);
            for d in dst.iter_mut() {
                *d *= inv;
            }
        }
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// Adds the bias of the fused query/key/value layer and splits its `[tokens, 3·hidden]` output
/// into `[3, heads, tokens, head_size]`, the layout the attention's matrix products read.
pub struct BiasSplitHeads {
    pub bias: Vec<f32>,
    pub heads: usize,
    pub head_size: usize,
}

impl CustomOp1 for BiasSplitHeads {
    fn name(&self) -> &'static str {
        "herma-bias-split-heads"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(self.name(), storage, layout)?;
        let (heads, size) = (self.heads, self.head_size);
        let width = 3 * heads * size;
        if width == 0 || self.bias.len() != width || x.len() % width != 0 {
            candle_core::bail!("{}: rows of {width} expected", self.name());
        }
        let tokens = x.len() / width;
        let mut out = vec![0f32; x.len()];
        for (token, row) in x.chunks_exact(width).enumerate() {
            for (part, (values, bias)) in row
                .chunks_exact(size)
                .zip(self.bias.chunks_exact(size))
                .enumerate()
            {
                // `part` counts heads across query, key and value: (which, head).
                let start = (part * tokens + token) * size;
                for ((d, v), b) in out[start..start + size].iter_mut().zip(values).zip(bias) {
                    *d = v + b;
                }
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((3, heads, tokens, size))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn range(from: f32, to: f32, steps: usize) -> Vec<f32> {
        #[allow(clippy::cast_precision_loss)]
        (0..=steps)
            .map(|i| from + (to - from) * i as f32 / steps as f32)
            .collect()
    }

    fn worst(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[test]
    fn the_fused_gelu_matches_candles_erf_gelu() {
        let xs = range(-12.0, 12.0, 4800);
        let t = Tensor::new(xs.as_slice(), &Device::Cpu).unwrap();
        let exact = t.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        let fused = t
            .apply_op1_no_bwd(&BiasGelu { bias: vec![0.0] })
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(worst(&exact, &fused) < 2e-6, "{}", worst(&exact, &fused));
    }

    #[test]
    fn the_fast_exponential_is_within_a_few_ulp() {
        for x in range(-87.0, 0.0, 100_000) {
            let (fast, exact) = (exp_non_positive(x), x.exp());
            assert!(
                (fast - exact).abs() <= 4.0 * f32::EPSILON * exact,
                "{x}: {fast} {exact}"
            );
        }
        assert_eq!(exp_non_positive(-1000.0), (-87.0f32).exp());
    }

    #[test]
    fn the_fused_softmax_and_norm_match_candles() {
        let xs: Vec<f32> = range(-3.0, 5.0, 383).iter().map(|x| x * x.sin()).collect();
        let t = Tensor::new(xs.as_slice(), &Device::Cpu)
            .unwrap()
            .reshape((2, 192))
            .unwrap();
        let exact = candle_nn::ops::softmax_last_dim(&t).unwrap();
        let fused = t.apply_op1_no_bwd(&Softmax).unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(worst(&flat(&exact), &flat(&fused)) < 1e-6);

        let bias = range(-0.5, 0.5, 191);
        let gamma = range(0.5, 1.5, 191);
        let beta = range(-0.1, 0.1, 191);
        let residual = (&t * 0.5).unwrap();
        let device = &Device::Cpu;
        let b = Tensor::new(bias.as_slice(), device).unwrap();
        let summed = t.broadcast_add(&b).unwrap().add(&residual).unwrap();
        let exact = candle_nn::ops::layer_norm(
            &summed,
            &Tensor::new(gamma.as_slice(), device).unwrap(),
            &Tensor::new(beta.as_slice(), device).unwrap(),
            1e-12,
        )
        .unwrap();
        let fused = t
            .apply_op2_no_bwd(
                &residual,
                &BiasResidualNorm {
                    bias,
                    gamma,
                    beta,
                    eps: 1e-12,
                },
            )
            .unwrap();
        assert!(worst(&flat(&exact), &flat(&fused)) < 1e-5);
    }

    #[test]
    fn splitting_heads_adds_the_bias_and_reorders() {
        let (tokens, heads, size) = (3, 2, 4);
        let width = 3 * heads * size;
        #[allow(clippy::cast_precision_loss)]
        let xs: Vec<f32> = (0..tokens * width).map(|i| i as f32).collect();
        let t = Tensor::new(xs.as_slice(), &Device::Cpu)
            .unwrap()
            .reshape((tokens, width))
            .unwrap();
        let bias = range(0.0, 1.0, width - 1);
        let b = Tensor::new(bias.as_slice(), &Device::Cpu).unwrap();
        let exact = t
            .broadcast_add(&b)
            .unwrap()
            .reshape((tokens, 3, heads, size))
            .unwrap()
            .permute((1, 2, 0, 3))
            .unwrap()
            .contiguous()
            .unwrap();
        let split = t
            .apply_op1_no_bwd(&BiasSplitHeads {
                bias,
                heads,
                head_size: size,
            })
            .unwrap();
        assert_eq!(split.dims(), exact.dims());
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(flat(&split), flat(&exact));
    }
}

//! A BERT encoder of our own, for one unpadded sequence, over candle's tensors: in f32 step
//! for step as candle-transformers' `BertModel` (the same vectors, bit for bit), or with its
//! linear layers in 8 bits.
//!
//! The 8-bit model is made from the f32 one at load:
//!
//! - Weights: `GgmlDType::Q8_0` (blocks of 32 with one scale each), multiplied by candle's
//!   AVX-512 VNNI / AVX-VNNI kernels, which quantize each row of activations in blocks of 256.
//!   Those kernels need input widths that are multiples of 256, so 384-wide inputs are padded
//!   with zero channels (exact: a zero channel adds nothing).
//! - Activation outliers: BERT's hidden states carry a few channels 10–50× larger than the rest,
//!   which would leave every other value of their block a few levels of resolution. Three exact
//!   rewrites of the f32 model keep them apart, measured on fixed texts at load
//!   ([`Bert::activation_maxima`]): each linear layer's input channels are divided by a
//!   per-channel scale and its weight columns multiplied by it (SmoothQuant, α = 0.7); the
//!   hidden channels are reordered, smallest first, so the largest share the padded block (and
//!   the feed-forward's inner channels likewise); the attention output's scales are folded into
//!   the value projection and 1/√head_size into the query's.
//! - Query, key and value are one 384 → 1152 product; the element-wise steps between products
//!   are fused single passes (`ops`).

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{D, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::ops::{BiasGelu, BiasResidualNorm, BiasSplitHeads, Prepare, Softmax};

/// How the linear layers' weights are held and multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// 8-bit where this CPU has the instructions candle's int8 kernels need (AVX-512 VNNI or
    /// AVX-VNNI), f32 elsewhere: without them the 8-bit products take a generic path slower
    /// than f32.
    #[default]
    Auto,
    /// 32-bit floats, as the model ships: the vectors of candle-transformers' BERT.
    F32,
    /// 8-bit weights and activations, derived from the f32 weights at load.
    Int8,
}

impl Precision {
    /// `Auto` decided for this CPU; the others as they are.
    pub fn resolve(self) -> Precision {
        match self {
            Precision::Auto if fast_int8() => Precision::Int8,
            Precision::Auto => Precision::F32,
            other => other,
        }
    }

    /// What this precision adds to a model identity: nothing for f32, so vectors stored before
    /// the 8-bit model existed stay valid for it. Rename the 8-bit suffix whenever its recipe
    /// (the calibration texts, [`SMOOTHING`], the channel order) changes, so that vectors
    /// stored by the previous one are recomputed.
    pub fn identity_suffix(self) -> &'static str {
        match self.resolve() {
            Precision::Int8 => ":q8",
            Precision::F32 | Precision::Auto => "",
        }
    }
}

/// Whether candle multiplies `Q8_0` weights with its VNNI kernels here (the CPUs its
/// `repack_x86::level` accepts for them).
fn fast_int8() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        (std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni"))
            || (std::arch::is_x86_feature_detected!("avxvnni")
                && std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The parts of `config.json` the encoder needs.
#[derive(Clone, Debug, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".into()
}

/// candle's repacked int8 kernels take input widths that are multiples of this.
const KERNEL_WIDTH: usize = 256;

/// A linear layer with 8-bit weights, without its bias (the fused step after it adds it).
struct Int8Linear {
    weight: QMatMul,
    prepare: Prepare,
}

impl Int8Linear {
    /// `weight` is `[out, in]`; `scale` multiplies its columns and divides the input's channels.
    fn new(weight: &Tensor, scale: &[f32]) -> Result<Self> {
        let (_, input) = weight.dims2()?;
        let weight = weight.broadcast_mul(&Tensor::new(scale, weight.device())?)?;
        let pad = input.next_multiple_of(KERNEL_WIDTH) - input;
        let weight = weight.pad_with_zeros(1, 0, pad)?;
        Ok(Self {
            weight: QMatMul::from_qtensor(QTensor::quantize(&weight, GgmlDType::Q8_0)?)?,
            prepare: Prepare {
                inv_scale: scale.iter().map(|v| 1.0 / v).collect(),
                pad,
            },
        })
    }

    /// `x · Wᵀ` for `x` of shape `[tokens, in]`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.weight.forward(&x.apply_op1_no_bwd(&self.prepare)?)
    }
}

/// SmoothQuant's α: how much of each activation channel's range moves into the weights. Chosen
/// by the vectors' error on held-out texts (0.6–0.8 were best, 0.7 by a hair; 0.5 is SmoothQuant's
/// default).
const SMOOTHING: f64 = 0.7;

/// Per-channel smoothing scales (SmoothQuant): `max|x_j|^α / max|W_·j|^(1-α)`, which moves the
/// activations' outliers into the weights, where every block of 32 has a scale of its own.
fn smoothing(weight: &Tensor, input_max: Option<&[f32]>) -> Result<Vec<f32>> {
    let (_, input) = weight.dims2()?;
    let Some(amax) = input_max.filter(|m| m.len() == input) else {
        return Ok(vec![1.0; input]);
    };
    let wmax = weight.abs()?.max(0)?.to_vec1::<f32>()?;
    Ok(amax
        .iter()
        .zip(&wmax)
        .map(|(a, w)| {
            if *a > 0.0 && *w > 0.0 {
                #[allow(clippy::cast_possible_truncation)]
                let s =
                    (f64::from(*a).powf(SMOOTHING) / f64::from(*w).powf(1.0 - SMOOTHING)) as f32;
                s
            } else {
                1.0
            }
        })
        .collect())
}

struct F32Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

struct Int8Layer {
    /// Query, key and value in one product; the query's rows are divided by √head_size and
    /// the value's by the attention output's smoothing scales.
    qkv: Int8Linear,
    split: BiasSplitHeads,
    attention_out: Int8Linear,
    attention_norm: BiasResidualNorm,
    intermediate: Int8Linear,
    activation: BiasGelu,
    output: Int8Linear,
    output_norm: BiasResidualNorm,
}

enum Layer {
    F32(F32Layer),
    Int8(Box<Int8Layer>),
}

/// The largest |x| per input channel of each linear layer, over some texts.
#[derive(Clone, Debug, Default)]
pub struct ActivationMaxima {
    /// Per layer, the inputs of: query/key/value, the attention output, the intermediate and
    /// the output layer.
    layers: Vec<[Vec<f32>; 4]>,
}

impl ActivationMaxima {
    fn observe(&mut self, layer: usize, site: usize, x: &Tensor) -> Result<()> {
        let seen = x.abs()?.max(0)?.to_vec1::<f32>()?;
        if self.layers.len() <= layer {
            self.layers.resize_with(layer + 1, Default::default);
        }
        let slot = &mut self.layers[layer][site];
        if slot.is_empty() {
            *slot = seen;
        } else {
            for (s, v) in slot.iter_mut().zip(seen) {
                *s = s.max(v);
            }
        }
        Ok(())
    }

    fn get(&self, layer: usize, site: usize) -> Option<&[f32]> {
        self.layers
            .get(layer)
            .map(|s| s[site].as_slice())
            .filter(|s| !s.is_empty())
    }
}

/// The encoder: token ids in, one hidden vector per token out.
pub struct Bert {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_size: usize,
    max_tokens: usize,
    eps: f64,
    /// When the hidden channels were reordered: the indices that restore the model's order.
    restore: Option<Tensor>,
}

fn bias(linear: &Linear) -> Result<Tensor> {
    linear
        .bias()
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("a linear layer without a bias".into()))
}

/// The channel indices ordered by `magnitude`, smallest first.
fn order_by(magnitude: &[f32]) -> Result<Vec<u32>> {
    let count = u32::try_from(magnitude.len())
        .map_err(|_| candle_core::Error::Msg("too many channels".into()))?;
    let mut order: Vec<u32> = (0..count).collect();
    order.sort_by(|a, b| magnitude[*a as usize].total_cmp(&magnitude[*b as usize]));
    Ok(order)
}

/// `values` in `order`.
fn pick(values: &[f32], order: &[u32]) -> Vec<f32> {
    order.iter().map(|i| values[*i as usize]).collect()
}

impl Bert {
    /// Reads the f32 weights under `vb` (with or without a `bert.` prefix).
    pub fn load(vb: VarBuilder, config: &BertConfig) -> Result<Self> {
        if config.hidden_act != "gelu" {
            candle_core::bail!(
                "hidden_act {:?}: only \"gelu\" (erf) is supported",
                config.hidden_act
            );
        }
        let (h, i) = (config.hidden_size, config.intermediate_size);
        if config.num_attention_heads == 0 || h % config.num_attention_heads != 0 {
            candle_core::bail!(
                "{} attention heads do not divide hidden_size {h}",
                config.num_attention_heads
            );
        }
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let eps = config.layer_norm_eps;
        let embeddings = vb.pp("embeddings");
        let word = embeddings.get((config.vocab_size, h), "word_embeddings.weight")?;
        let position = embeddings.get(
            (config.max_position_embeddings, h),
            "position_embeddings.weight",
        )?;
        let token_type =
            embeddings.get((config.type_vocab_size, h), "token_type_embeddings.weight")?;
        let embedding_norm = candle_nn::layer_norm(h, eps, embeddings.pp("LayerNorm"))?;
        let layers = (0..config.num_hidden_layers)
            .map(|index| {
                let vb = vb.pp(format!("encoder.layer.{index}"));
                let attention = vb.pp("attention");
                Ok(Layer::F32(F32Layer {
                    query: candle_nn::linear(h, h, attention.pp("self.query"))?,
                    key: candle_nn::linear(h, h, attention.pp("self.key"))?,
                    value: candle_nn::linear(h, h, attention.pp("self.value"))?,
                    attention_out: candle_nn::linear(h, h, attention.pp("output.dense"))?,
                    attention_norm: candle_nn::layer_norm(
                        h,
                        eps,
                        attention.pp("output.LayerNorm"),
                    )?,
                    intermediate: candle_nn::linear(h, i, vb.pp("intermediate.dense"))?,
                    output: candle_nn::linear(i, h, vb.pp("output.dense"))?,
                    output_norm: candle_nn::layer_norm(h, eps, vb.pp("output.LayerNorm"))?,
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word,
            position,
            token_type,
            embedding_norm,
            layers,
            heads: config.num_attention_heads,
            head_size: h / config.num_attention_heads,
            max_tokens: config.max_position_embeddings,
            eps,
            restore: None,
        })
    }

    /// The largest activations entering each linear layer over `texts` (token ids).
    pub fn activation_maxima(&self, texts: &[Vec<u32>]) -> Result<ActivationMaxima> {
        let mut maxima = ActivationMaxima::default();
        for ids in texts {
            self.run(ids, &mut Some(&mut maxima))?;
        }
        Ok(maxima)
    }

    /// This f32 model with its linear layers in 8 bits, its activations' outliers kept apart
    /// by `maxima` (see the module's documentation).
    pub fn quantized(&self, maxima: &ActivationMaxima) -> Result<Self> {
        let device = self.word.device().clone();
        let hidden = self.word.dim(1)?;
        // The hidden channels, smallest activations first, over every input they feed.
        let mut largest = vec![0f32; hidden];
        for layer in 0..self.layers.len() {
            for site in [0, 2] {
                for (l, v) in largest
                    .iter_mut()
                    .zip(maxima.get(layer, site).unwrap_or(&[]))
                {
                    *l = l.max(*v);
                }
            }
        }
        let hidden_order = order_by(&largest)?;
        let hidden_index = Tensor::new(hidden_order.as_slice(), &device)?;
        let mut restore = vec![0u32; hidden];
        for (position, channel) in (0u32..).zip(&hidden_order) {
            restore[*channel as usize] = position;
        }
        let to_vec = |t: &Tensor| t.to_vec1::<f32>();
        let reordered = |t: &Tensor| to_vec(&t.index_select(&hidden_index, 0)?);
        let residual_norm = |bias: &Tensor, norm: &LayerNorm| -> Result<BiasResidualNorm> {
            let beta = norm
                .bias()
                .ok_or_else(|| candle_core::Error::Msg("a LayerNorm without a bias".into()))?;
            #[allow(clippy::cast_possible_truncation)]
            let eps = self.eps as f32;
            Ok(BiasResidualNorm {
                bias: reordered(bias)?,
                gamma: reordered(norm.weight())?,
                beta: reordered(beta)?,
                eps,
            })
        };
        #[allow(clippy::cast_precision_loss)]
        let inv_sqrt_head = 1.0 / (self.head_size as f64).sqrt();
        let mut layers = Vec::with_capacity(self.layers.len());
        for (index, layer) in self.layers.iter().enumerate() {
            let Layer::F32(f) = layer else {
                candle_core::bail!("the model is already quantized")
            };
            let seen = |site: usize| maxima.get(index, site);

            // The attention output's scales, folded into the value projection: the context is
            // a weighted mean of values, so dividing a value channel divides that channel of
            // the context.
            let out_scale = smoothing(f.attention_out.weight(), seen(1))?;
            let inv_out = Tensor::new(
                out_scale
                    .iter()
                    .map(|s| 1.0 / s)
                    .collect::<Vec<f32>>()
                    .as_slice(),
                &device,
            )?;
            let qkv_weight = Tensor::cat(
                &[
                    &(f.query.weight() * inv_sqrt_head)?,
                    f.key.weight(),
                    &f.value.weight().broadcast_mul(&inv_out.unsqueeze(1)?)?,
                ],
                0,
            )?
            .index_select(&hidden_index, 1)?;
            let qkv_bias = Tensor::cat(
                &[
                    &(bias(&f.query)? * inv_sqrt_head)?,
                    &bias(&f.key)?,
                    &bias(&f.value)?.mul(&inv_out)?,
                ],
                0,
            )?;
            let qkv_seen = seen(0).map(|m| pick(m, &hidden_order));
            let qkv_scale = smoothing(&qkv_weight, qkv_seen.as_deref())?;
            let attention_out_weight = f
                .attention_out
                .weight()
                .broadcast_mul(&Tensor::new(out_scale.as_slice(), &device)?)?
                .index_select(&hidden_index, 0)?;

            // The feed-forward's inner channels, reordered the same way.
            let inner = f.intermediate.weight().dim(0)?;
            let inner_order = match seen(3) {
                Some(m) if m.len() == inner => order_by(m)?,
                _ => (0..u32::try_from(inner).unwrap_or(u32::MAX)).collect(),
            };
            let inner_index = Tensor::new(inner_order.as_slice(), &device)?;
            let intermediate_weight = f
                .intermediate
                .weight()
                .index_select(&inner_index, 0)?
                .index_select(&hidden_index, 1)?;
            let intermediate_seen = seen(2).map(|m| pick(m, &hidden_order));
            let intermediate_scale = smoothing(&intermediate_weight, intermediate_seen.as_deref())?;
            let output_weight = f
                .output
                .weight()
                .index_select(&hidden_index, 0)?
                .index_select(&inner_index, 1)?;
            let output_seen = seen(3).map(|m| pick(m, &inner_order));
            let output_scale = smoothing(&output_weight, output_seen.as_deref())?;

            layers.push(Layer::Int8(Box::new(Int8Layer {
                qkv: Int8Linear::new(&qkv_weight, &qkv_scale)?,
                split: BiasSplitHeads {
                    bias: to_vec(&qkv_bias)?,
                    heads: self.heads,
                    head_size: self.head_size,
                },
                attention_out: Int8Linear::new(&attention_out_weight, &vec![1.0; hidden])?,
                attention_norm: residual_norm(&bias(&f.attention_out)?, &f.attention_norm)?,
                intermediate: Int8Linear::new(&intermediate_weight, &intermediate_scale)?,
                activation: BiasGelu {
                    bias: to_vec(&bias(&f.intermediate)?.index_select(&inner_index, 0)?)?,
                },
                output: Int8Linear::new(&output_weight, &output_scale)?,
                output_norm: residual_norm(&bias(&f.output)?, &f.output_norm)?,
            })));
        }
        let beta = self
            .embedding_norm
            .bias()
            .ok_or_else(|| candle_core::Error::Msg("a LayerNorm without a bias".into()))?;
        Ok(Self {
            word: self.word.index_select(&hidden_index, 1)?,
            position: self.position.index_select(&hidden_index, 1)?,
            token_type: self.token_type.index_select(&hidden_index, 1)?,
            embedding_norm: LayerNorm::new(
                self.embedding_norm
                    .weight()
                    .index_select(&hidden_index, 0)?,
                beta.index_select(&hidden_index, 0)?,
                self.eps,
            ),
            layers,
            heads: self.heads,
            head_size: self.head_size,
            max_tokens: self.max_tokens,
            eps: self.eps,
            restore: Some(Tensor::new(restore.as_slice(), &device)?),
        })
    }

    /// The hidden states `[tokens, hidden]` of one sequence of token ids (token type 0).
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor> {
        self.run(ids, &mut None)
    }

    fn run(&self, ids: &[u32], observe: &mut Option<&mut ActivationMaxima>) -> Result<Tensor> {
        let tokens = ids.len();
        if tokens == 0 || tokens > self.max_tokens {
            candle_core::bail!("{tokens} tokens (1 to {} are embedded)", self.max_tokens);
        }
        let ids = Tensor::new(ids, self.word.device())?;
        // Summed in BERT's order: (word + token type) + position.
        let words = self.word.index_select(&ids, 0)?;
        let types = self.token_type.narrow(0, 0, 1)?;
        let positions = self.position.narrow(0, 0, tokens)?;
        let embedded = words.broadcast_add(&types)?.add(&positions)?;
        let mut hidden = self.embedding_norm.forward(&embedded)?;
        for (index, layer) in self.layers.iter().enumerate() {
            hidden = match layer {
                Layer::F32(layer) => {
                    self.layer_f32(layer, &hidden, &mut |site, x| match observe {
                        Some(maxima) => maxima.observe(index, site, x),
                        None => Ok(()),
                    })?
                }
                Layer::Int8(layer) => self.layer_int8(layer, &hidden)?,
            };
        }
        match &self.restore {
            Some(restore) => hidden.index_select(restore, 1),
            None => Ok(hidden),
        }
    }

    /// `[heads, tokens, head_size]` back to `[tokens, hidden]`.
    fn heads_joined(&self, x: &Tensor) -> Result<Tensor> {
        let tokens = x.dim(1)?;
        x.transpose(0, 1)?
            .contiguous()?
            .reshape((tokens, self.heads * self.head_size))
    }

    /// candle-transformers' BERT layer, step for step; `seen` is shown each linear layer's input.
    fn layer_f32(
        &self,
        layer: &F32Layer,
        hidden: &Tensor,
        seen: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<Tensor> {
        let heads_first = |x: &Tensor| -> Result<Tensor> {
            x.reshape((x.dim(0)?, self.heads, self.head_size))?
                .transpose(0, 1)?
                .contiguous()
        };
        seen(0, hidden)?;
        let query = heads_first(&layer.query.forward(hidden)?)?;
        let key = heads_first(&layer.key.forward(hidden)?)?;
        let value = heads_first(&layer.value.forward(hidden)?)?;
        #[allow(clippy::cast_precision_loss)]
        let scale = (self.head_size as f64).sqrt();
        let scores = (query.matmul(&key.t()?)? / scale)?;
        let probabilities = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let context = self.heads_joined(&probabilities.matmul(&value)?)?;
        seen(1, &context)?;
        let attended = layer
            .attention_norm
            .forward(&(layer.attention_out.forward(&context)? + hidden)?)?;
        seen(2, &attended)?;
        let activated = layer.intermediate.forward(&attended)?.gelu_erf()?;
        seen(3, &activated)?;
        layer
            .output_norm
            .forward(&(layer.output.forward(&activated)? + &attended)?)
    }

    fn layer_int8(&self, layer: &Int8Layer, hidden: &Tensor) -> Result<Tensor> {
        let qkv = layer.qkv.forward(hidden)?.apply_op1_no_bwd(&layer.split)?;
        let (query, key, value) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let probabilities = query.matmul(&key.t()?)?.apply_op1_no_bwd(&Softmax)?;
        let context = self.heads_joined(&probabilities.matmul(&value)?)?;
        let attended = layer
            .attention_out
            .forward(&context)?
            .apply_op2_no_bwd(hidden, &layer.attention_norm)?;
        let activated = layer
            .intermediate
            .forward(&attended)?
            .apply_op1_no_bwd(&layer.activation)?;
        layer
            .output
            .forward(&activated)?
            .apply_op2_no_bwd(&attended, &layer.output_norm)
    }
}

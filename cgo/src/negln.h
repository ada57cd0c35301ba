/* negln.h: -ln(u) for the sampler's exponential countdowns, without libm.
 * A draw follows every sampled block and every realloc of a large one
 * (under realloc_chain, 5.6M a run): the series it used first, after a
 * loop halving u into [1, 2), was 14% of that program's time. Here u's
 * exponent comes from its bits, and ln of its mantissa m from a table at
 * 256 points c and a short series in r = m/c - 1 (|r| < 1/256): within
 * 1e-9 of libm's, relative (absolute where -ln u < 1: a countdown of under
 * a mean rate), checked by cgo/testdata/negln_test.c. */
#ifndef TA_NEGLN_H
#define TA_NEGLN_H

#include <stdint.h>
#include <string.h>

#define TA_LN2 0.6931471805599453

/* The tables are constants (hexadecimal, bit for bit what
 * _ta_ln_series gives: negln_test.c checks them): filled at start, they
 * were two pages every process wrote before its first malloc returned, two
 * page faults of about 14 us each on the 2-core VM, in each of the 40
 * processes of pyenv's python shim. */
static const double _ta_ln_at[256] = { /* ln(1 + i/256) */
  0x0p+0, 0x1.ff00aa2b10bcp-9, 0x1.fe02a6b106789p-8, 0x1.7dc475f810a77p-7,
  0x1.fc0a8b0fc03e3p-7, 0x1.3cea44346a576p-6, 0x1.7b91b07d5b11bp-6, 0x1.b9fc027af9197p-6,
  0x1.f829b0e783301p-6, 0x1.1b0d98923d98p-5, 0x1.39e87b9febd6p-5, 0x1.58a5bafc8e4d4p-5,
  0x1.77458f632dcfcp-5, 0x1.95c830ec8e3ecp-5, 0x1.b42dd711971bep-5, 0x1.d276b8adb0b52p-5,
  0x1.f0a30c01162a7p-5, 0x1.075983598e47p-4, 0x1.16536eea37ae1p-4, 0x1.253f62f0a1417p-4,
  0x1.341d7961bd1d1p-4, 0x1.42edcbea646f1p-4, 0x1.51b073f06183fp-4, 0x1.60658a93750c4p-4,
  0x1.6f0d28ae56b4cp-4, 0x1.7da766d7b12ccp-4, 0x1.8c345d6319b21p-4, 0x1.9ab42462033acp-4,
  0x1.a926d3a4ad562p-4, 0x1.b78c82bb0edap-4, 0x1.c5e548f5bc745p-4, 0x1.d4313d66cb35dp-4,
  0x1.e27076e2af2e6p-4, 0x1.f0a30c01162a8p-4, 0x1.fec9131dbeabbp-4, 0x1.0671512ca596fp-3,
  0x1.0d77e7cd08e59p-3, 0x1.14785846742adp-3, 0x1.1b72ad52f67ap-3, 0x1.2266f190a5acbp-3,
  0x1.29552f81ff522p-3, 0x1.303d718e47fd3p-3, 0x1.371fc201e8f73p-3, 0x1.3dfc2b0ecc62ap-3,
  0x1.44d2b6ccb7d1ep-3, 0x1.4ba36f39a55e5p-3, 0x1.526e5e3a1b437p-3, 0x1.59338d9982085p-3,
  0x1.5ff3070a793d4p-3, 0x1.66acd4272ad5p-3, 0x1.6d60fe719d21cp-3, 0x1.740f8f54037a3p-3,
  0x1.7ab890210d908p-3, 0x1.815c0a14357eap-3, 0x1.87fa06520c91p-3, 0x1.8e928de886d41p-3,
  0x1.9525a9cf456b4p-3, 0x1.9bb362e7dfb82p-3, 0x1.a23bc1fe2b562p-3, 0x1.a8becfc882f18p-3,
  0x1.af3c94e80bff3p-3, 0x1.b5b519e8fb5a5p-3, 0x1.bc286742d8cd5p-3, 0x1.c2968558c18c1p-3,
  0x1.c8ff7c79a9a21p-3, 0x1.cf6354e09c5dcp-3, 0x1.d5c216b4fbb91p-3, 0x1.dc1bca0abec7ep-3,
  0x1.e27076e2af2e7p-3, 0x1.e8c0252aa5a6p-3, 0x1.ef0adcbdc5937p-3, 0x1.f550a564b7b36p-3,
  0x1.fb9186d5e3e29p-3, 0x1.00e6c45ad501ep-2, 0x1.0402594b4d042p-2, 0x1.071b85fcd590dp-2,
  0x1.0a324e27390e5p-2, 0x1.0d46b579ab74cp-2, 0x1.1058bf9ae4ad6p-2, 0x1.136870293a8b1p-2,
  0x1.1675cababa60fp-2, 0x1.1980d2dd4237p-2, 0x1.1c898c16999fcp-2, 0x1.1f8ff9e48a2f2p-2,
  0x1.22941fbcf7965p-2, 0x1.2596010df7639p-2, 0x1.2895a13de86a2p-2, 0x1.2b9303ab89d24p-2,
  0x1.2e8e2bae11d3p-2, 0x1.31871c9544186p-2, 0x1.347dd9a987d54p-2, 0x1.3772662bfd85cp-2,
  0x1.3a64c556945eap-2, 0x1.3d54fa5c1f71p-2, 0x1.404308686a7e3p-2, 0x1.432ef2a04e812p-2,
  0x1.4618bc21c5ec2p-2, 0x1.49006804009dp-2, 0x1.4be5f957778a2p-2, 0x1.4ec9732600269p-2,
  0x1.51aad872df82ep-2, 0x1.548a2c3add263p-2, 0x1.5767717455a6bp-2, 0x1.5a42ab0f4cfe1p-2,
  0x1.5d1bdbf5809cbp-2, 0x1.5ff3070a793d3p-2, 0x1.62c82f2b9c793p-2, 0x1.659b57303e1f2p-2,
  0x1.686c81e9b14afp-2, 0x1.6b3bb2235943dp-2, 0x1.6e08eaa2ba1e3p-2, 0x1.70d42e2789235p-2,
  0x1.739d7f6bbd007p-2, 0x1.7664e1239dbcfp-2, 0x1.792a55fdd47a4p-2, 0x1.7bede0a37afcp-2,
  0x1.7eaf83b82afc4p-2, 0x1.816f41da0d497p-2, 0x1.842d1da1e8b18p-2, 0x1.86e919a330b9fp-2,
  0x1.89a3386c1425bp-2, 0x1.8c5b7c858b48ap-2, 0x1.8f11e873662c7p-2, 0x1.91c67eb45a83ep-2,
  0x1.947941c2116fbp-2, 0x1.972a341135158p-2, 0x1.99d958117e08bp-2, 0x1.9c86b02dc0863p-2,
  0x1.9f323ecbf984dp-2, 0x1.a1dc064d5b995p-2, 0x1.a484090e5bb0bp-2, 0x1.a72a4966bd9eap-2,
  0x1.a9cec9a9a0849p-2, 0x1.ac718c258b0e4p-2, 0x1.af1293247786dp-2, 0x1.b1b1e0ebdfc5ap-2,
  0x1.b44f77bcc8f61p-2, 0x1.b6eb59d3cf35dp-2, 0x1.b9858969310fbp-2, 0x1.bc1e08b0dad0bp-2,
  0x1.beb4d9da71b7cp-2, 0x1.c149ff115f026p-2, 0x1.c3dd7a7cdad4dp-2, 0x1.c66f4e3ff6ffbp-2,
  0x1.c8ff7c79a9a21p-2, 0x1.cb8e0744d7ac7p-2, 0x1.ce1af0b85f3ecp-2, 0x1.d0a63ae721e65p-2,
  0x1.d32fe7e00ebd5p-2, 0x1.d5b7f9ae2c683p-2, 0x1.d83e7258a2f3fp-2, 0x1.dac353e2c5953p-2,
  0x1.dd46a04c1c4ap-2, 0x1.dfc859906d5b5p-2, 0x1.e24881a7c6c26p-2, 0x1.e4c71a8687705p-2,
  0x1.e744261d68788p-2, 0x1.e9bfa659861f4p-2, 0x1.ec399d2468ccp-2, 0x1.eeb20c640ddf3p-2,
  0x1.f128f5faf06ebp-2, 0x1.f39e5bc811e5ap-2, 0x1.f6123fa7028acp-2, 0x1.f884a36fe9ec2p-2,
  0x1.faf588f78f31ep-2, 0x1.fd64f20f61574p-2, 0x1.ffd2e0857f498p-2, 0x1.011fab125ff8ap-1,
  0x1.02552a5a5d0ffp-1, 0x1.0389eefce633cp-1, 0x1.04bdf9da926d2p-1, 0x1.05f14bd26459bp-1,
  0x1.0723e5c1cdf3fp-1, 0x1.0855c884b450ep-1, 0x1.0986f4f573521p-1, 0x1.0ab76bece14d3p-1,
  0x1.0be72e4252a84p-1, 0x1.0d163ccb9d6b7p-1, 0x1.0e44985d1cc8bp-1, 0x1.0f7241c9b497bp-1,
  0x1.109f39e2d4c99p-1, 0x1.11cb81787ccf8p-1, 0x1.12f719593efbcp-1, 0x1.1422025243d45p-1,
  0x1.154c3d2f4d5eap-1, 0x1.1675cababa60ep-1, 0x1.179eabbd899ap-1, 0x1.18c6e0ff5cf06p-1,
  0x1.19ee6b467c96ep-1, 0x1.1b154b57da29fp-1, 0x1.1c3b81f713c26p-1, 0x1.1d610fe677002p-1,
  0x1.1e85f5e7040cfp-1, 0x1.1faa34b87094bp-1, 0x1.20cdcd192ab6ep-1, 0x1.21f0bfc65beecp-1,
  0x1.23130d7bebf44p-1, 0x1.2434b6f483935p-1, 0x1.2555bce98f7ccp-1, 0x1.26762013430e1p-1,
  0x1.2795e1289b11dp-1, 0x1.28b500df60782p-1, 0x1.29d37fec2b089p-1, 0x1.2af15f02640acp-1,
  0x1.2c0e9ed448e8bp-1, 0x1.2d2b4012edc9dp-1, 0x1.2e47436e40267p-1, 0x1.2f62a99509546p-1,
  0x1.307d7334f10bdp-1, 0x1.3197a0fa7fe6bp-1, 0x1.32b1339121d71p-1, 0x1.33ca2ba328995p-1,
  0x1.34e289d9ce1d1p-1, 0x1.35fa4edd36eap-1, 0x1.37117b54747b4p-1, 0x1.38280fe58797ep-1,
  0x1.393e0d3562a1ap-1, 0x1.3a5373e7ebdf9p-1, 0x1.3b68449fffc21p-1, 0x1.3c7c7fff73206p-1,
  0x1.3d9026a7156f9p-1, 0x1.3ea33936b2f5bp-1, 0x1.3fb5b84d16f43p-1, 0x1.40c7a4880dce9p-1,
  0x1.41d8fe84672b1p-1, 0x1.42e9c6ddf80bep-1, 0x1.43f9fe2f9ce67p-1, 0x1.4509a5133bb0bp-1,
  0x1.4618bc21c5ec4p-1, 0x1.472743f33aaacp-1, 0x1.48353d1ea88dfp-1, 0x1.4942a83a2fc07p-1,
  0x1.4a4f85db03eb8p-1, 0x1.4b5bd6956e274p-1, 0x1.4c679afccee38p-1, 0x1.4d72d3a39fdp-1,
  0x1.4e7d811b75bafp-1, 0x1.4f87a3f5026e9p-1, 0x1.50913cc01686cp-1, 0x1.519a4c0ba3445p-1,
  0x1.52a2d265bc5acp-1, 0x1.53aad05b99b7dp-1, 0x1.54b2467999496p-1, 0x1.55b9354b40bccp-1,
  0x1.56bf9d5b3f398p-1, 0x1.57c57f336f191p-1, 0x1.58cadb5cd798ap-1, 0x1.59cfb25fae87fp-1,
  0x1.5ad404c359f2dp-1, 0x1.5bd7d30e71c75p-1, 0x1.5cdb1dc6c1766p-1, 0x1.5ddde57149924p-1,
  0x1.5ee02a9241676p-1, 0x1.5fe1edad18918p-1, 0x1.60e32f44788d8p-1, 0x1.61e3efda46468p-1,
};
static const double _ta_inv_at[256] = { /* 1 / (1 + i/256) */
  0x1p+0, 0x1.fe01fe01fe02p-1, 0x1.fc07f01fc07fp-1, 0x1.fa11caa01fa12p-1,
  0x1.f81f81f81f82p-1, 0x1.f6310aca0dbb5p-1, 0x1.f44659e4a4271p-1, 0x1.f25f644230ab5p-1,
  0x1.f07c1f07c1f08p-1, 0x1.ee9c7f8458e02p-1, 0x1.ecc07b301eccp-1, 0x1.eae807aba01ebp-1,
  0x1.e9131abf0b767p-1, 0x1.e741aa59750e4p-1, 0x1.e573ac901e574p-1, 0x1.e3a9179dc1a73p-1,
  0x1.e1e1e1e1e1e1ep-1, 0x1.e01e01e01e01ep-1, 0x1.de5d6e3f8868ap-1, 0x1.dca01dca01dcap-1,
  0x1.dae6076b981dbp-1, 0x1.d92f2231e7f8ap-1, 0x1.d77b654b82c34p-1, 0x1.d5cac807572b2p-1,
  0x1.d41d41d41d41dp-1, 0x1.d272ca3fc5b1ap-1, 0x1.d0cb58f6ec074p-1, 0x1.cf26e5c44bfc6p-1,
  0x1.cd85689039b0bp-1, 0x1.cbe6d9601cbe7p-1, 0x1.ca4b3055ee191p-1, 0x1.c8b265afb8a42p-1,
  0x1.c71c71c71c71cp-1, 0x1.c5894d10d4986p-1, 0x1.c3f8f01c3f8fp-1, 0x1.c26b5392ea01cp-1,
  0x1.c0e070381c0ep-1, 0x1.bf583ee868d8bp-1, 0x1.bdd2b899406f7p-1, 0x1.bc4fd65883e7bp-1,
  0x1.bacf914c1badp-1, 0x1.b951e2b18ff23p-1, 0x1.b7d6c3dda338bp-1, 0x1.b65e2e3beee05p-1,
  0x1.b4e81b4e81b4fp-1, 0x1.b37484ad806cep-1, 0x1.b2036406c80d9p-1, 0x1.b094b31d922a4p-1,
  0x1.af286bca1af28p-1, 0x1.adbe87f94905ep-1, 0x1.ac5701ac5701bp-1, 0x1.aaf1d2f87ebfdp-1,
  0x1.a98ef606a63bep-1, 0x1.a82e65130e159p-1, 0x1.a6d01a6d01a6dp-1, 0x1.a574107688a4ap-1,
  0x1.a41a41a41a41ap-1, 0x1.a2c2a87c51cap-1, 0x1.a16d3f97a4b02p-1, 0x1.a01a01a01a01ap-1,
  0x1.9ec8e951033d9p-1, 0x1.9d79f176b682dp-1, 0x1.9c2d14ee4a102p-1, 0x1.9ae24ea5510dap-1,
  0x1.999999999999ap-1, 0x1.9852f0d8ec0ffp-1, 0x1.970e4f80cb872p-1, 0x1.95cbb0be377aep-1,
  0x1.948b0fcd6e9ep-1, 0x1.934c67f9b2ce6p-1, 0x1.920fb49d0e229p-1, 0x1.90d4f120190d5p-1,
  0x1.8f9c18f9c18fap-1, 0x1.8e6527af1373fp-1, 0x1.8d3018d3018d3p-1, 0x1.8bfce8062ff3ap-1,
  0x1.8acb90f6bf3aap-1, 0x1.899c0f601899cp-1, 0x1.886e5f0abb04ap-1, 0x1.87427bcc092b9p-1,
  0x1.8618618618618p-1, 0x1.84f00c2780614p-1, 0x1.83c977ab2beddp-1, 0x1.82a4a0182a4ap-1,
  0x1.8181818181818p-1, 0x1.8060180601806p-1, 0x1.7f405fd017f4p-1, 0x1.7e225515a4f1dp-1,
  0x1.7d05f417d05f4p-1, 0x1.7beb3922e017cp-1, 0x1.7ad2208e0ecc3p-1, 0x1.79baa6bb6398bp-1,
  0x1.78a4c8178a4c8p-1, 0x1.77908119ac60dp-1, 0x1.767dce434a9b1p-1, 0x1.756cac201756dp-1,
  0x1.745d1745d1746p-1, 0x1.734f0c541fe8dp-1, 0x1.724287f46debcp-1, 0x1.713786d9c7c09p-1,
  0x1.702e05c0b817p-1, 0x1.6f26016f26017p-1, 0x1.6e1f76b4337c7p-1, 0x1.6d1a62681c861p-1,
  0x1.6c16c16c16c17p-1, 0x1.6b1490aa31a3dp-1, 0x1.6a13cd153729p-1, 0x1.691473a88d0cp-1,
  0x1.6816816816817p-1, 0x1.6719f3601671ap-1, 0x1.661ec6a5122f9p-1, 0x1.6524f853b4aa3p-1,
  0x1.642c8590b2164p-1, 0x1.63356b88ac0dep-1, 0x1.623fa7701624p-1, 0x1.614b36831ae94p-1,
  0x1.6058160581606p-1, 0x1.5f66434292dfcp-1, 0x1.5e75bb8d015e7p-1, 0x1.5d867c3ece2a5p-1,
  0x1.5c9882b931057p-1, 0x1.5babcc647fa91p-1, 0x1.5ac056b015acp-1, 0x1.59d61f123ccaap-1,
  0x1.58ed2308158edp-1, 0x1.580560158056p-1, 0x1.571ed3c506b3ap-1, 0x1.56397ba7c52e2p-1,
  0x1.5555555555555p-1, 0x1.54725e6bb82fep-1, 0x1.5390948f40febp-1, 0x1.52aff56a8054bp-1,
  0x1.51d07eae2f815p-1, 0x1.50f22e111c4c5p-1, 0x1.5015015015015p-1, 0x1.4f38f62dd4c9bp-1,
  0x1.4e5e0a72f0539p-1, 0x1.4d843bedc2c4cp-1, 0x1.4cab88725af6ep-1, 0x1.4bd3edda68fe1p-1,
  0x1.4afd6a052bf5bp-1, 0x1.4a27fad76014ap-1, 0x1.49539e3b2d067p-1, 0x1.488052201488p-1,
  0x1.47ae147ae147bp-1, 0x1.46dce34596066p-1, 0x1.460cbc7f5cf9ap-1, 0x1.453d9e2c776cap-1,
  0x1.446f86562d9fbp-1, 0x1.43a2730abee4dp-1, 0x1.42d6625d51f87p-1, 0x1.420b5265e5951p-1,
  0x1.4141414141414p-1, 0x1.40782d10e6566p-1, 0x1.3fb013fb013fbp-1, 0x1.3ee8f42a5af07p-1,
  0x1.3e22cbce4a902p-1, 0x1.3d5d991aa75c6p-1, 0x1.3c995a47babe7p-1, 0x1.3bd60d9232955p-1,
  0x1.3b13b13b13b14p-1, 0x1.3a524387ac822p-1, 0x1.3991c2c187f63p-1, 0x1.38d22d366088ep-1,
  0x1.3813813813814p-1, 0x1.3755bd1c945eep-1, 0x1.3698df3de0748p-1, 0x1.35dce5f9f2af8p-1,
  0x1.3521cfb2b78c1p-1, 0x1.34679ace01346p-1, 0x1.33ae45b57bcb2p-1, 0x1.32f5ced6a1dfap-1,
  0x1.323e34a2b10bfp-1, 0x1.3187758e9ebb6p-1, 0x1.30d190130d19p-1, 0x1.301c82ac4026p-1,
  0x1.2f684bda12f68p-1, 0x1.2eb4ea1fed14bp-1, 0x1.2e025c04b8097p-1, 0x1.2d50a012d50ap-1,
  0x1.2c9fb4d812cap-1, 0x1.2bef98e5a3711p-1, 0x1.2b404ad012b4p-1, 0x1.2a91c92f3c105p-1,
  0x1.29e4129e4129ep-1, 0x1.293725bb804a5p-1, 0x1.288b01288b013p-1, 0x1.27dfa38a1ce4dp-1,
  0x1.27350b8812735p-1, 0x1.268b37cd60127p-1, 0x1.25e22708092f1p-1, 0x1.2539d7e9177b2p-1,
  0x1.2492492492492p-1, 0x1.23eb79717605bp-1, 0x1.23456789abcdfp-1, 0x1.22a0122a0122ap-1,
  0x1.21fb78121fb78p-1, 0x1.21579804855e6p-1, 0x1.20b470c67c0d9p-1, 0x1.2012012012012p-1,
  0x1.1f7047dc11f7p-1, 0x1.1ecf43c7fb84cp-1, 0x1.1e2ef3b3fb874p-1, 0x1.1d8f5672e4abdp-1,
  0x1.1cf06ada2811dp-1, 0x1.1c522fc1ce059p-1, 0x1.1bb4a4046ed29p-1, 0x1.1b17c67f2bae3p-1,
  0x1.1a7b9611a7b96p-1, 0x1.19e0119e0119ep-1, 0x1.19453808ca29cp-1, 0x1.18ab083902bdbp-1,
  0x1.1811811811812p-1, 0x1.1778a191bd684p-1, 0x1.16e0689427379p-1, 0x1.1648d50fc3201p-1,
  0x1.15b1e5f75270dp-1, 0x1.151b9a3fdd5c9p-1, 0x1.1485f0e0acd3bp-1, 0x1.13f0e8d344724p-1,
  0x1.135c81135c811p-1, 0x1.12c8b89edc0acp-1, 0x1.12358e75d3033p-1, 0x1.11a3019a74826p-1,
  0x1.1111111111111p-1, 0x1.107fbbe01108p-1, 0x1.0fef010fef011p-1, 0x1.0f5edfab325a2p-1,
  0x1.0ecf56be69c9p-1, 0x1.0e40655826011p-1, 0x1.0db20a88f4696p-1, 0x1.0d24456359e3ap-1,
  0x1.0c9714fbcda3bp-1, 0x1.0c0a7868b4171p-1, 0x1.0b7e6ec259dc8p-1, 0x1.0af2f722eecb5p-1,
  0x1.0a6810a6810a7p-1, 0x1.09ddba6af836p-1, 0x1.0953f39010954p-1, 0x1.08cabb37565e2p-1,
  0x1.0842108421084p-1, 0x1.07b9f29b8eae2p-1, 0x1.073260a47f7c6p-1, 0x1.06ab59c7912fbp-1,
  0x1.0624dd2f1a9fcp-1, 0x1.059eea0727586p-1, 0x1.05197f7d73404p-1, 0x1.04949cc1664c5p-1,
  0x1.041041041041p-1, 0x1.038c6b78247fcp-1, 0x1.03091b51f5e1ap-1, 0x1.02864fc7729e9p-1,
  0x1.0204081020408p-1, 0x1.0182436517a37p-1, 0x1.010101010101p-1, 0x1.008040201008p-1,
};

/* ln(x) for x in [1, 2), by the odd series of atanh: slow, what the
 * tables hold (the test checks them against it). */
static inline double _ta_ln_series(double x) {
  double z = (x - 1) / (x + 1), z2 = z * z, sum = 0, term = z;
  for (int k = 1; k < 60; k += 2, term *= z2) sum += term / k;
  return 2 * sum;
}

/* -ln(u) for u in (0, 1) (a normal double). */
static inline double _ta_neg_ln(double u) {
  uint64_t b;
  memcpy(&b, &u, sizeof b);
  int e = (int)(b >> 52) - 1023;
  uint64_t frac = b & ((1ull << 52) - 1);
  unsigned i = (unsigned)(frac >> 44);
  double m, c = 1 + i / 256.0;
  b = frac | (1023ull << 52);
  memcpy(&m, &b, sizeof m);
  double r = (m - c) * _ta_inv_at[i];
  return -(e * TA_LN2 + _ta_ln_at[i] + r * (1 - r * (0.5 - r * (1.0 / 3 - r * 0.25))));
}

#endif

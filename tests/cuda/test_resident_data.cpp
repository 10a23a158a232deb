// The dataset on the device (Note [Data on the device] in data/loader.h): batches gathered,
// cropped, flipped and normalized by kernels equal the host loader's bit for bit, for every batch
// of several epochs, with a sampler, without a transform, after a resume; and what it cannot do
// is refused with a message.

#include <catch2/catch.hpp>
#include <cstring>

#include <ember/ember.h>

using namespace ember;

namespace {

std::shared_ptr<data::InMemoryImageDataset> random_images(int64_t n, int64_t c, int64_t h, int64_t w) {
  manual_seed(3);
  const Tensor images = randint(0, 256, {n, c, h, w}).to(DType::u8);
  const Tensor labels = randint(0, 10, {n});
  return std::make_shared<data::InMemoryImageDataset>(images, labels);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel() * dtype_size(x.dtype()))) == 0;
}

// Every batch of `epochs` epochs from both loaders, compared.
void require_same_batches(data::DataLoader& host, data::DataLoader& resident, int epochs) {
  for (int e = 0; e < epochs; ++e) {
    std::vector<data::Batch> want;
    for (auto& b : host) want.push_back(b);
    size_t i = 0;
    for (auto& b : resident) {
      INFO("epoch " << e << " batch " << i);
      REQUIRE(i < want.size());
      REQUIRE(b.images.device() == Device::cuda(0));
      REQUIRE(same_bits(b.images, want[i].images));
      REQUIRE(same_bits(b.labels, want[i].labels));
      ++i;
    }
    REQUIRE(i == want.size());
  }
}

}  // namespace

TEST_CASE("cuda: data on the device gives the host loader's batches bit for bit", "[cuda][loader][resident]") {
  const auto dataset = random_images(50, 3, 9, 7);
  const data::AnyTransform transform = data::Compose{data::RandomCrop(8, 6, 2), data::RandomHorizontalFlip(0.5),
                                                     data::ToTensor(),
                                                     data::Normalize({0.4, 0.5, 0.6}, {0.2, 0.25, 0.3})};
  data::LoaderOptions o{.batch_size = 16, .shuffle = true, .seed = 5, .transform = transform};
  o.device = Device::cuda(0);
  data::LoaderOptions r = o;
  r.data_on_device = true;
  r.num_workers = 2;  // unused: nothing is left for host workers to do
  data::DataLoader host(dataset, o), resident(dataset, r);
  REQUIRE(resident.size() == 4);  // 16 + 16 + 16 + 2
  require_same_batches(host, resident, 3);

  SECTION("a resumed loader continues with the same batch") {
    host.set_position({7, 2});
    resident.set_position({7, 2});
    auto h = host.begin();
    auto d = resident.begin();
    REQUIRE(same_bits(d->images, h->images));
    REQUIRE(same_bits(d->labels, h->labels));
  }
}

TEST_CASE("cuda: data on the device with a sampler, drop_last and no transform", "[cuda][loader][resident]") {
  const auto dataset = random_images(41, 1, 6, 6);
  for (const bool with_transform : {false, true}) {
    INFO("transform: " << with_transform);
    data::LoaderOptions o{.batch_size = 5, .drop_last = true, .seed = 9};
    if (with_transform) o.transform = data::Compose{data::RandomCrop(6, 6, 1), data::ToTensor()};
    o.sampler = std::make_shared<data::DistributedSampler>(
        41, data::DistributedOptions{.rank = 1, .world_size = 3, .shuffle = true, .seed = 9});
    o.device = Device::cuda(0);
    data::LoaderOptions r = o;
    r.data_on_device = true;
    data::DataLoader host(dataset, o), resident(dataset, r);
    REQUIRE(resident.size() == 2);  // 14 samples on this rank, 2 full batches of 5
    require_same_batches(host, resident, 2);
  }
}

TEST_CASE("cuda: data on the device refuses what it cannot do", "[cuda][loader][resident]") {
  const auto dataset = random_images(8, 1, 4, 4);
  data::LoaderOptions o{.batch_size = 4, .data_on_device = true};
  o.device = Device::cuda(0);

  data::LoaderOptions cpu = o;
  cpu.device = Device::cpu();
  REQUIRE_THROWS_WITH(data::DataLoader(dataset, cpu), Catch::Contains("data_on_device needs a CUDA device"));

  data::LoaderOptions unfused = o;
  unfused.transform = data::Compose{data::ToTensor(), data::RandomCrop(4, 4, 1)};
  REQUIRE_THROWS_WITH(data::DataLoader(dataset, unfused),
                      Catch::Contains("is not of the form [RandomCrop] [RandomHorizontalFlip] ToTensor [Normalize]"));

  data::LoaderOptions mixed = o;
  mixed.mix = {.mixup_alpha = 0.2, .num_classes = 10};
  REQUIRE_THROWS_WITH(data::DataLoader(dataset, mixed), Catch::Contains("Mixup and CutMix run on the host"));

  const auto floats = std::make_shared<data::TensorDataset>(zeros({8, 1, 4, 4}), zeros({8}, {.dtype = DType::i64}));
  REQUIRE_THROWS_WITH(data::DataLoader(floats, o), Catch::Contains("needs a dataset of u8 images"));
}

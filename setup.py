"""ament_python package: smcik_ros."""
from glob import glob

from setuptools import find_packages, setup

package_name = 'smcik_ros'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'benchmarks']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.py')),
        ('share/' + package_name + '/config', glob('config/*')),
        ('share/' + package_name + '/urdf', glob('urdf/*.urdf') + glob('urdf/*.srdf')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='smcik_ros developers',
    maintainer_email='smcik-ros@example.com',
    description='Online inverse kinematics for ROS 2 with a Sequential Monte Carlo filter, '
                'Jacobian and distance-driven solvers.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'smcik_node = smcik_ros.node:main',
            'sim_arm = smcik_ros.sim_arm:main',
            'smcik_demo = smcik_ros.demo:main',
            'goal_markers = smcik_ros.ros.goal_markers:main',
        ],
    },
)
